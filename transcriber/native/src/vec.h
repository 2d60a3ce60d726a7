// The vector helpers both kernel sources share (kernels.cpp, gemm.cpp): the path's native
// float vector, bf16 widening, exp and GELU. Included once per translation unit.

#pragma once

#include <stdint.h>
#include <string.h>

#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#ifndef TK_PATH
#define TK_PATH portable
#endif
#define TK_CAT2(a, b) tk_##a##_##b
#define TK_CAT(a, b) TK_CAT2(a, b)
#define TK(name) TK_CAT(TK_PATH, name)
#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// vf is the path's native vector: 16 lanes (zmm), 8 (ymm), 4 (xmm, NEON). Vectors wider than
// the registers make GCC go through memory, so the width follows the path; the packed weight
// layout (blocks of LANES = 16 columns) is the same on every path.
#if defined(__AVX512F__)
constexpr int W = 16;
#elif defined(__AVX2__)
constexpr int W = 8;
#else
constexpr int W = 4;
#endif
constexpr int LANES = 16;
constexpr int S = LANES / W;  // vectors per packed block
typedef float vf __attribute__((vector_size(4 * W)));
typedef int32_t vi __attribute__((vector_size(4 * W)));
typedef uint32_t vu __attribute__((vector_size(4 * W)));
typedef uint16_t vh __attribute__((vector_size(2 * W)));

inline vf load(const float* p) { vf v; memcpy(&v, p, sizeof v); return v; }
inline void store(float* p, vf v) { memcpy(p, &v, sizeof v); }
inline vf splat(float x) { return vf{} + x; }

// bfloat16 is the high half of a float32: widening is a 16-bit shift.
#if defined(__AVX512F__)
inline vf load_w(const uint16_t* p) {  // one vpmovzxwd + vpslld
  return (vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16);
}
#elif defined(__AVX2__)
inline vf load_w(const uint16_t* p) {
  return (vf)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16);
}
#else
inline vf load_w(const uint16_t* p) {
  vh h;
  memcpy(&h, p, sizeof h);
  vu u = __builtin_convertvector(h, vu) << 16;
  vf f;
  memcpy(&f, &u, sizeof f);
  return f;
}
#endif
inline vf load_w(const float* p) { return load(p); }

inline float hsum(vf v) {  // pairwise, so the compiler keeps it in registers
  float s[W];
  memcpy(s, &v, sizeof s);
  for (int w = W / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) s[i] += s[i + w];
  return s[0];
}
inline float hmax(vf v) {
  float s[W];
  memcpy(s, &v, sizeof s);
  for (int w = W / 2; w > 0; w /= 2)
    for (int i = 0; i < w; i++) s[i] = s[i] > s[i + w] ? s[i] : s[i + w];
  return s[0];
}
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf vabs(vf a) { return a < 0 ? -a : a; }

// exp(x) = 2^n 2^f, n = round(x log2 e), f in [-1/2, 1/2]: 2^f by its Taylor terms to the 6th
// (relative error < 3e-7); below 2^-126, and for -inf, exactly 0 (an all-zero exponent field).
const float kLog2e = 1.4426950408889634f;
const float kExp2[6] = {0.69314718f, 0.24022651f, 0.05550411f, 0.00961813f, 0.00133336f, 0.00015404f};

inline vf vexp(vf x) {
  vf y = x * kLog2e;
  y = y > 127.0f ? splat(127.0f) : y;
  y = y < -127.0f ? splat(-127.0f) : y;  // also -inf and NaN-free masked scores
  vf z = y + 0.5f;
  vi n = __builtin_convertvector(z, vi);  // truncates toward zero: make it a floor
  n += (__builtin_convertvector(n, vf) > z);  // a true comparison is -1
  vf f = y - __builtin_convertvector(n, vf);
  const float* c = kExp2;
  vf p = 1.0f + f * (c[0] + f * (c[1] + f * (c[2] + f * (c[3] + f * (c[4] + f * c[5])))));
  vi bits = (n + 127) << 23;
  vf scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float sexp(float x) {  // the same function, one lane (tails)
  vf v = vexp(splat(x));
  return v[0];
}

// erf(z) ~ 1 - 1 / (1 + a1 z + ... + a6 z^6)^16, z >= 0, |error| < 3e-7 (Abramowitz & Stegun
// 7.1.28): the exact-form GELU x Phi(x) with multiplies, adds and one divide.
const float kErf[6] = {0.0705230784f, 0.0422820123f, 0.0092705272f, 0.0001520143f, 0.0002765672f, 0.0000430638f};

inline vf vgelu(vf x) {
  vf a = vabs(x);
  vf z = a * 0.70710678118654752f;
  const float* c = kErf;
  vf p = 1.0f + z * (c[0] + z * (c[1] + z * (c[2] + z * (c[3] + z * (c[4] + z * c[5])))));
  p = p * p;
  p = p * p;
  p = p * p;
  p = p * p;
  return 0.5f * x + 0.5f * a * (1.0f - 1.0f / p);
}

// In place over rows of N: p = exp(s - max) / sum. -inf scores give exactly 0; a row of only
// -inf gives 0 everywhere (MLX gives NaN there; no caller sends one).
void softmax_row(int N, float* s) {
  const int nv = N - N % W;
  vf m = splat(-__builtin_inff());
  for (int i = 0; i < nv; i += W) m = vmax(m, load(s + i));
  float mx = hmax(m);
  for (int i = nv; i < N; i++) mx = s[i] > mx ? s[i] : mx;
  if (mx == -__builtin_inff()) {
    memset(s, 0, N * sizeof(float));
    return;
  }
  vf acc = {};
  for (int i = 0; i < nv; i += W) {
    vf e = vexp(load(s + i) - mx);
    store(s + i, e);
    acc += e;
  }
  float sum = hsum(acc);
  for (int i = nv; i < N; i++) sum += (s[i] = sexp(s[i] - mx));
  float inv = 1.0f / sum;
  for (int i = 0; i < nv; i += W) store(s + i, load(s + i) * inv);
  for (int i = nv; i < N; i++) s[i] *= inv;
}

}  // namespace

// pool.cpp: fn(arg, 0 .. parts - 1) on the caller and up to threads - 1 helpers, each thread
// claiming parts as it comes (the caller never waits for a helper that has not started).
void TK(run_parts)(int parts, int threads, void (*fn)(void*, int), void* arg);

namespace {

// Column blocks a part of a threaded linear holds: a multiple of 4 (the widest block group),
// about 16 parts a thread so a late thread's share is taken by the others, at least 8 blocks.
inline int part_blocks(int blocks, int threads) {
  const int per = (blocks / (threads * 16) + 3) / 4 * 4;
  return per < 8 ? 8 : per;
}

// run_parts with a lambda: f(part) for every part.
template <typename F>
inline void run_parts(int parts, int threads, const F& f) {
  TK(run_parts)(parts, threads, [](void* c, int i) { (*static_cast<const F*>(c))(i); }, (void*)&f);
}

}  // namespace
