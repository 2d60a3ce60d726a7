// A small driver of one path's kernel library, for a CPU whose Python we cannot run here: it is
// built for aarch64 and run under qemu-aarch64 by tests/test_native_emulated.py, and built for
// this machine to give the reference (a path that passed its checks against MLX here).
//
//   harness LIBRARY PATH   ->  one line per output: "name v0 v1 ..." (float32 as %.9g)
//
// Inputs come from a fixed generator, so every build of the harness feeds the same numbers.

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

static uint64_t state = 21;

static float next_value() {  // xorshift64*, mapped to about N(0, 1) by a sum of uniforms
  float sum = 0;
  for (int i = 0; i < 4; i++) {
    state ^= state >> 12, state ^= state << 25, state ^= state >> 27;
    sum += (float)((state * 2685821657736338717ull) >> 40) / (float)(1 << 24);
  }
  return (sum - 2.0f) * 1.7f;
}

static float* values(long n) {
  float* p = (float*)aligned_alloc(64, ((n * 4 + 63) / 64) * 64);
  for (long i = 0; i < n; i++) p[i] = next_value();
  return p;
}

static void* zeros(long bytes) {
  void* p = aligned_alloc(64, ((bytes + 63) / 64) * 64);
  memset(p, 0, ((bytes + 63) / 64) * 64);
  return p;
}

static void print(const char* name, const float* y, long n) {
  printf("%s", name);
  for (long i = 0; i < n; i++) printf(" %.9g", y[i]);
  printf("\n");
}

static void* lib;
static std::string prefix;

template <typename F>
static F fn(const char* name) {
  void* f = dlsym(lib, (prefix + name).c_str());
  if (!f) {
    fprintf(stderr, "missing %s%s\n", prefix.c_str(), name);
    exit(2);
  }
  return (F)f;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: harness LIBRARY PATH\n");
    return 2;
  }
  lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "%s\n", dlerror());
    return 2;
  }
  prefix = std::string("tk_") + argv[2] + "_";

  auto pack = fn<void (*)(int, int, const float*, int, void*)>("pack");
  auto linear = fn<void (*)(int, int, int, const float*, const void*, int, const float*, const float*, float*)>("linear");
  const int K = 100, N = 37;
  float* w = values((long)N * K);
  float* b = values(N);
  for (int wtype = 0; wtype <= 1; wtype++) {
    void* packed = zeros((long)((N + 15) / 16) * K * 16 * 4);
    pack(N, K, w, wtype, packed);
    for (int rows = 1; rows <= 8; rows++) {
      float* x = values((long)rows * K);
      float* res = values((long)rows * N);
      std::vector<float> y((long)rows * N);
      linear(rows, K, N, x, packed, wtype, b, res, y.data());
      char name[64];
      snprintf(name, sizeof name, "linear_w%d_r%d", wtype, rows);
      print(name, y.data(), (long)rows * N);
    }
  }

  auto int8_bytes = fn<long (*)(int, int)>("int8_bytes");
  auto pack_int8 = fn<void (*)(int, int, const float*, void*)>("pack_int8");
  {
    void* packed = zeros(int8_bytes(N, K));
    pack_int8(N, K, w, packed);
    for (int rows = 1; rows <= 8; rows++) {
      float* x = values((long)rows * K);
      std::vector<float> y((long)rows * N);
      linear(rows, K, N, x, packed, 3, b, nullptr, y.data());
      char name[64];
      snprintf(name, sizeof name, "linear_int8_r%d", rows);
      print(name, y.data(), (long)rows * N);
    }
  }

  auto dot_rows = fn<void (*)(int, int, int, const float*, const float*, float*, int)>("dot_rows");
  for (int rows = 1; rows <= 6; rows++) {
    float* x = values((long)rows * K);
    std::vector<float> y((long)rows * N);
    dot_rows(rows, K, N, x, w, y.data(), 1);
    char name[64];
    snprintf(name, sizeof name, "dot_rows_r%d", rows);
    print(name, y.data(), (long)rows * N);
  }

  auto layer_norm = fn<void (*)(int, int, const float*, const float*, const float*, float, float*)>("layer_norm");
  {
    const int R = 3, D = 384;
    float *x = values((long)R * D), *g = values(D), *bb = values(D);
    std::vector<float> y((long)R * D);
    layer_norm(R, D, x, g, bb, 1e-5f, y.data());
    print("layer_norm", y.data(), (long)R * D);
  }

  auto gelu = fn<void (*)(long, const float*, float*)>("gelu");
  {
    const long n = 1003;
    float* x = values(n);
    x[0] = -12, x[1] = 0, x[2] = 12;
    std::vector<float> y(n);
    gelu(n, x, y.data());
    print("gelu", y.data(), n);
  }

  auto softmax = fn<void (*)(long, int, float*)>("softmax");
  {
    const int R = 6, C = 77;
    float* s = values((long)R * C);
    for (int i = 0; i < 40; i++) s[C + i] = -INFINITY;  // a masked row start
    s[2 * C + 5] = -INFINITY;
    softmax(R, C, s);
    print("softmax", s, (long)R * C);
  }

  auto gemm_pack = fn<void (*)(int, int, const float*, uint32_t*)>("gemm_pack");
  auto gemm = fn<int (*)(int, int, int, const float*, long, const uint32_t*, const float*, const float*, long, int,
                         float*, long, int, int)>("gemm");
  {
    const int M = 37, GN = 50, GK = 70;
    float *a = values((long)M * GK), *gw = values((long)GN * GK), *bias = values(GN), *res = values((long)M * GN);
    uint32_t* packed = (uint32_t*)zeros((long)((GN + 15) / 16) * ((GK + 1) / 2) * 16 * 4);
    gemm_pack(GN, GK, gw, packed);
    std::vector<float> c((long)M * GN);
    for (int act = 0; act <= 1; act++) {
      if (gemm(M, GN, GK, a, GK, packed, bias, res, GN, act, c.data(), GN, 0, 1) != 0) return 3;
      print(act ? "gemm_gelu" : "gemm", c.data(), (long)M * GN);
    }
  }

  auto igemm_pack = fn<void (*)(int, int, const float*, int, uint32_t*, float*, float*)>("igemm_pack");
  auto igemm = fn<void (*)(int, int, int, const float*, long, const uint32_t*, const float*, const float*, int,
                           const float*, const float*, long, int, float*, long, int)>("igemm");
  {
    const int M = 37, GN = 50, GK = 301, LEVELS = 2047;  // K over two exact chunks of 128
    float *a = values((long)M * GK), *gw = values((long)GN * GK), *bias = values(GN), *res = values((long)M * GN);
    uint32_t* packed = (uint32_t*)zeros((long)((GN + 15) / 16) * ((GK + 1) / 2) * 16 * 4);
    float *scale = (float*)zeros((long)(GN + 15) / 16 * 16 * 4), *channel = (float*)zeros((GK + 1) * 4L);
    igemm_pack(GN, GK, gw, LEVELS, packed, scale, channel);
    std::vector<float> c((long)M * GN);
    for (int act = 0; act <= 1; act++) {
      igemm(M, GN, GK, a, GK, packed, scale, channel, LEVELS, bias, res, GN, act, c.data(), GN, 1);
      print(act ? "igemm_gelu" : "igemm", c.data(), (long)M * GN);
    }
  }
  return 0;
}
