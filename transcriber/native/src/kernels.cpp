// Whisper's CPU hot loops as a plain C ABI over float32 buffers (transcriber/native/).
//
// One source, compiled once per instruction set (build.py passes -DTK_PATH=avx512 with
// -mavx512f..., avx2 with -mavx2 -mfma, portable with the compiler's baseline: SSE2 on x86_64,
// NEON on aarch64). The code uses GCC/Clang vector extensions, 16 float lanes wide: the
// compiler maps them onto one zmm, two ymm or four xmm/NEON registers, so the same arithmetic
// runs on every path and only the speed differs. Every exported name carries the path:
// tk_avx512_linear, tk_avx2_linear, ... (loader.py picks one set at run time).
//
// Shapes are in the comments of each function; R is a handful of rows (decoder steps: 1-8),
// weights are (N, K) row-major as in nn.Linear, in bfloat16 (wtype 1) or float32 (wtype 0).

#include "vec.h"

// int8.cpp: the linears with int8 weights (wtype 3, 4)
void TK(linear_int8)(int R, int K, int N, const float* x, const void* packed, bool vnni, const float* b,
                     const float* res, float* y, int threads);

namespace {

// The R rows' sums of nb column blocks from block j on, plus the bias and the residual, into y
// (only the valid columns of the last block).
template <int R, int V>
inline void store_blocks(const vf (&acc)[R][V], int j, int nb, const float* b, const float* res, float* y, int N) {
  for (int r = 0; r < R; r++) {
    float out[V * W];
    memcpy(out, acc[r], sizeof out);
    const int n0 = j * LANES, valid = N - n0 < nb * LANES ? N - n0 : nb * LANES;
    float* yr = y + (long)r * N + n0;
    const float* rr = res ? res + (long)r * N + n0 : nullptr;
    const float* bb = b ? b + n0 : nullptr;
    for (int i = 0; i < valid; i++) yr[i] = out[i] + (bb ? bb[i] : 0.0f) + (rr ? rr[i] : 0.0f);
  }
}

// y[r, n] = sum_k x[r, k] w[n, k] + b[n] + res[r, n]. The weights come packed once at load
// (kernels.py ``Packed``): blocks of 16 output columns, (N/16, K, 16), so a vector holds
// adjacent columns at one k and the sums need no horizontal reduction. B blocks at a time for
// R rows: R * B * S independent accumulators hide the FMA latency, and each weight is read
// once for all rows.
template <int R, int B, typename T>
void linear_blocks(int K, int j0, int blocks, const float* x, const T* w, const float* b, const float* res,
                   float* y, int N) {
  constexpr int V = B * S;  // vectors per k
  for (int j = j0; j < blocks; j += B) {
    const int nb = blocks - j < B ? blocks - j : B;
    vf acc[R][V] = {};
    const T* wj = w + (long)j * K * LANES;
    if (nb == B) {
      for (int k = 0; k < K; k++) {
        vf wv[V];
        for (int c = 0; c < V; c++) wv[c] = load_w(wj + ((long)(c / S) * K + k) * LANES + (c % S) * W);
        for (int r = 0; r < R; r++) {
          const float xr = x[(long)r * K + k];
          for (int c = 0; c < V; c++) acc[r][c] += xr * wv[c];
        }
      }
    } else {  // the last blocks
      for (int k = 0; k < K; k++)
        for (int c = 0; c < nb * S; c++) {
          vf wv = load_w(wj + ((long)(c / S) * K + k) * LANES + (c % S) * W);
          for (int r = 0; r < R; r++) acc[r][c] += x[(long)r * K + k] * wv;
        }
    }
    store_blocks<R, V>(acc, j, nb, b, res, y, N);
  }
}

// Packed rows (p steps, 64 bytes of a block each) ahead of each weight stream that linear_pairs
// prefetches: the hardware prefetchers stop at every 4 KiB page, and a step reads ~16k pages of
// weights, each a restart; prefetching in software runs across them. Near a block's end the
// stream goes on where it continues: the same block of the next group (a group's four blocks
// are only 12 KB each at K 384, so each group would start cold). docs/speed.md: the 40 MB
// projection 2.2 -> 1.3 ms on Zen 5.
constexpr int AHEAD_ROWS = 32;
// From 3 rows on, twice as far: their FMAs make an iteration ~2x longer, and 32 rows ahead came
// sooner than the memory's latency (issue 30, Zen 5, the 4-row projection: AVX2 1.61 -> 1.49-1.53
// ms, AVX-512 1.00-1.07 -> 0.77; 96 measured the same as 64).
template <int R>
constexpr int ahead_rows() {
  return R >= 3 ? 2 * AHEAD_ROWS : AHEAD_ROWS;
}

// NB blocks of the pairs layout from wj on, for R rows: sums into acc. NB is a compile-time
// constant so lo/hi/acc stay in registers (a run-time count kept them on the stack).
template <int R, int NB>
inline void pairs_blocks(int P, int even, int K, const float* x, const uint32_t* wj, vf (&acc)[R][NB * S]) {
  constexpr int V = NB * S;
  const long group = (long)NB * P * LANES;  // words from a block to the same block of the next group
  constexpr int AHEAD = ahead_rows<R>();
  for (int p = 0; p < P; p++) {
    vf lo[V], hi[V];
    const long ahead = p + AHEAD < P ? (long)AHEAD * LANES : group - (long)(P - AHEAD) * LANES;
    for (int c = 0; c < V; c++) {
      const uint32_t* a = wj + ((long)(c / S) * P + p) * LANES + (c % S) * W;
      if (c % S == 0) __builtin_prefetch(a + ahead, 0, 3);
      vu u;
      memcpy(&u, a, sizeof u);
      vu l = u << 16, h = u & 0xFFFF0000u;
      memcpy(&lo[c], &l, sizeof l);
      memcpy(&hi[c], &h, sizeof h);
    }
    for (int r = 0; r < R; r++) {
      const float x0 = x[(long)r * K + 2 * p], x1 = p < even ? x[(long)r * K + 2 * p + 1] : 0.0f;
      for (int c = 0; c < V; c++) acc[r][c] += x0 * lo[c] + x1 * hi[c];
    }
  }
}

// The same product with the weights in gemm_pack's layout (gemm.cpp): bf16 pairs of k in one
// 32-bit word, (ceil(N/16), ceil(K/2), 16). One load gives two k's for 16 columns, widened by a
// shift (even k) and a mask (odd k): half the widening work of the (N/16, K, 16) layout per
// weight, the same products and float32 sums. The encoder-side GEMM and the prompt pass share
// these packed weights.
template <int R, int B>
void linear_pairs(int K, int j0, int blocks, const float* x, const uint32_t* w, const float* b, const float* res,
                  float* y, int N) {
  const int P = (K + 1) / 2, even = K / 2;
  int j = j0;
  for (; j + B <= blocks; j += B) {
    vf acc[R][B * S] = {};
    pairs_blocks<R, B>(P, even, K, x, w + (long)j * P * LANES, acc);
    store_blocks<R, B * S>(acc, j, B, b, res, y, N);
  }
  for (; j < blocks; j++) {  // the last blocks, one at a time
    vf acc[R][S] = {};
    pairs_blocks<R, 1>(P, even, K, x, w + (long)j * P * LANES, acc);
    store_blocks<R, S>(acc, j, 1, b, res, y, N);
  }
}

// Blocks at a time for R rows: as many accumulators as the registers hold (32 zmm; 16 ymm/xmm).
constexpr int MAX_ROWS = S == 1 ? 8 : S == 2 ? 6 : 3;
template <int R>
constexpr int blocks_for() {
  if (S == 1) return R <= 4 ? 4 : R <= 6 ? 3 : 2;
  const int b = 12 / (R * S);
  return b < 1 ? 1 : b > 4 ? 4 : b;
}

void linear_range(int R, int K, int N, int j0, int blocks, const float* x, const uint32_t* w, const float* b,
                  const float* res, float* y) {
  switch (R) {
    case 1: return linear_pairs<1, blocks_for<1>()>(K, j0, blocks, x, w, b, res, y, N);
    case 2: return linear_pairs<2, blocks_for<2>()>(K, j0, blocks, x, w, b, res, y, N);
    case 3: return linear_pairs<3, blocks_for<3>()>(K, j0, blocks, x, w, b, res, y, N);
    case 4: return linear_pairs<4, blocks_for<4>()>(K, j0, blocks, x, w, b, res, y, N);
    case 5: return linear_pairs<5, blocks_for<5>()>(K, j0, blocks, x, w, b, res, y, N);
    case 6: return linear_pairs<6, blocks_for<6>()>(K, j0, blocks, x, w, b, res, y, N);
    case 7: return linear_pairs<7, blocks_for<7>()>(K, j0, blocks, x, w, b, res, y, N);
    default: return linear_pairs<8, blocks_for<8>()>(K, j0, blocks, x, w, b, res, y, N);
  }
}

template <typename T>
void linear_range(int R, int K, int N, int j0, int blocks, const float* x, const T* w, const float* b,
                  const float* res, float* y) {
  switch (R) {
    case 1: return linear_blocks<1, blocks_for<1>(), T>(K, j0, blocks, x, w, b, res, y, N);
    case 2: return linear_blocks<2, blocks_for<2>(), T>(K, j0, blocks, x, w, b, res, y, N);
    case 3: return linear_blocks<3, blocks_for<3>(), T>(K, j0, blocks, x, w, b, res, y, N);
    case 4: return linear_blocks<4, blocks_for<4>(), T>(K, j0, blocks, x, w, b, res, y, N);
    case 5: return linear_blocks<5, blocks_for<5>(), T>(K, j0, blocks, x, w, b, res, y, N);
    case 6: return linear_blocks<6, blocks_for<6>(), T>(K, j0, blocks, x, w, b, res, y, N);
    case 7: return linear_blocks<7, blocks_for<7>(), T>(K, j0, blocks, x, w, b, res, y, N);
    default: return linear_blocks<8, blocks_for<8>(), T>(K, j0, blocks, x, w, b, res, y, N);
  }
}

// Threads for the large linears (the vocabulary projection: 40 MB of bf16 a step, more than
// one core's memory bandwidth) and the attention heads; set by tk_<path>_set_threads. They run
// through pool.cpp's run_parts: a thread that is not running leaves its parts to the others.
int g_threads = 1;
// Below this many weights a linear stays on one thread: handing out parts costs more than it
// saves.
constexpr long PARALLEL_WEIGHTS = 1L << 17;

template <typename T>
void linear_any(int R, int K, int N, const float* x, const T* w, const float* b, const float* res, float* y) {
  const int blocks = (N + LANES - 1) / LANES;
  const int threads = (long)N * K >= PARALLEL_WEIGHTS ? g_threads : 1;
  if (threads <= 1) return linear_range(R, K, N, 0, blocks, x, w, b, res, y);
  const int per = part_blocks(blocks, threads);
  run_parts((blocks + per - 1) / per, threads, [&](int part) {
    const int j0 = part * per, j1 = j0 + per < blocks ? j0 + per : blocks;
    linear_range(R, K, N, j0, j1, x, w, b, res, y);
  });
}

// w: packed (ceil(N/16), K, 16) in wtype (1 bf16, 0 float32), or (wtype 2) gemm_pack's bf16
// pairs (ceil(N/16), ceil(K/2), 16), or (wtype 3, 4: VNNI where the path has it) int8.cpp's
// int8 layout; res may be y (in place).
void linear(int R, int K, int N, const float* x, const void* w, int wtype, const float* b, const float* res,
            float* y) {
  if (wtype >= 3)
    return TK(linear_int8)(R, K, N, x, w, wtype == 4, b, res, y, (long)N * K >= PARALLEL_WEIGHTS ? g_threads : 1);
  for (int r0 = 0; r0 < R; r0 += MAX_ROWS) {  // rows beyond what the registers hold: in turns
    int rows = R - r0 < MAX_ROWS ? R - r0 : MAX_ROWS;
    const float* xr = x + (long)r0 * K;
    const float* rr = res ? res + (long)r0 * N : nullptr;
    if (wtype == 2)
      linear_any(rows, K, N, xr, (const uint32_t*)w, b, rr, y + (long)r0 * N);
    else if (wtype == 1)
      linear_any(rows, K, N, xr, (const uint16_t*)w, b, rr, y + (long)r0 * N);
    else
      linear_any(rows, K, N, xr, (const float*)w, b, rr, y + (long)r0 * N);
  }
}

void layer_norm(int R, int D, const float* x, const float* g, const float* b, float eps, float* y) {
  const int dv = D - D % W;
  for (int r = 0; r < R; r++) {
    const float* xr = x + (long)r * D;
    float* yr = y + (long)r * D;
    vf s = {};
    for (int i = 0; i < dv; i += W) s += load(xr + i);
    float mean = hsum(s);
    for (int i = dv; i < D; i++) mean += xr[i];
    mean /= D;
    vf q = {};
    for (int i = 0; i < dv; i += W) {
      vf d = load(xr + i) - mean;
      q += d * d;
    }
    float var = hsum(q);
    for (int i = dv; i < D; i++) var += (xr[i] - mean) * (xr[i] - mean);
    float rstd = 1.0f / __builtin_sqrtf(var / D + eps);
    for (int i = 0; i < dv; i += W) store(yr + i, (load(xr + i) - mean) * rstd * load(g + i) + load(b + i));
    for (int i = dv; i < D; i++) yr[i] = (xr[i] - mean) * rstd * g[i] + b[i];
  }
}

void gelu(long n, const float* x, float* y) {
  long i = 0;
  for (; i + W <= n; i += W) store(y + i, vgelu(load(x + i)));
  if (i < n) {  // the tail through one padded vector
    float t[W] = {};
    memcpy(t, x + i, (n - i) * sizeof(float));
    vf v = vgelu(load(t));
    memcpy(y + i, &v, (n - i) * sizeof(float));
  }
}

// Software prefetch of n elements from p on (every cache line of them): the audio's keys are
// read 64 dims x 64 positions a tile, 64 strided streams, more than the hardware prefetchers
// follow, and every stream crosses a 4 KiB page each 32 tiles.
template <typename T>
inline void prefetch_span(const T* p, int n) {
  for (int b = 0; b < n * (int)sizeof(T); b += 64) __builtin_prefetch((const char*)p + b, 0, 3);
}
// Positions ahead that the attention loops prefetch: ~2 KiB of bf16 values at Dh 64 (the
// audio), 4 KiB of float32 keys or values (the self-attention cache, position-major).
constexpr int AHEAD_POSITIONS = 16;

// Strides in elements of a (rows, heads, positions, head dim) tensor; one of pos/dim is 1.
struct Strides {
  long row, head, pos, dim;
};

inline float tof(float x) { return x; }
inline float tof(uint16_t h) {  // bfloat16 bits -> float
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Vectors a register tile of RR rows spans in attend_shared (positions for the scores, dims for
// the values): RR x C accumulators, at least 8 (two FMA pipes x 4 cycles of latency: with 4, as
// before, one row's tile waited on its own sums: the cross-attention on AVX2 ran at half the
// speed of AVX-512 for one row), at most what the registers hold beside C keys: 16 zmm or 8 ymm / xmm.
constexpr int MAX_SHARED_DH = 256;  // head widths attend_shared takes (Whisper's: 64)
template <int RR>
constexpr int shared_vectors() {
  const int budget = S == 1 ? 16 : 8, c = budget / RR;
  return c < 2 ? 2 : c > 8 ? 8 : c;
}

// Scores of RR rows for C vectors of positions from t: s[r][t...] = q[r] . keys, q (RR, Dh) already
// scaled (a broadcast from memory per row and dim: scaling there cost a multiply and a move). valid < W:
// one vector (C 1) of the last `valid` positions, read through a zero-padded copy.
template <int RR, int C, typename KV>
inline void shared_scores(int Dh, const float* q, const KV* kt, long kdim, int t, int valid, float* const* s) {
  vf acc[RR][C] = {};
  for (int d = 0; d < Dh; d++) {
    const KV* kd = kt + d * kdim + t;
    vf k[C];
    if (valid < W) {
      KV tail[W] = {};
      memcpy(tail, kd, valid * sizeof(KV));
      k[0] = load_w(tail);
    } else {
      if (C > 1) prefetch_span(kd + 2 * C * W, C * W);  // this dim's positions two tiles on
      for (int c = 0; c < C; c++) k[c] = load_w(kd + c * W);
    }
    for (int r = 0; r < RR; r++) {
      const float qd = q[r * Dh + d];
      for (int c = 0; c < C; c++) acc[r][c] += qd * k[c];
    }
  }
  for (int r = 0; r < RR; r++) {
    if (valid < W) {
      float tail[W];
      store(tail, acc[r][0]);
      memcpy(s[r] + t, tail, valid * sizeof(float));
    } else {
      for (int c = 0; c < C; c++) store(s[r] + t + c * W, acc[r][c]);
    }
  }
}

// out[r][d0 ... d0 + C W) = sum over the T positions of s[r][u] values[u]: U positions at a time
// into their own sums (U x RR x C >= 8 chains where the rows and dims are few), added at the end.
template <int RR, int C, typename KV>
inline void shared_values(int T, int d0, const KV* v, long vpos, float* const* s, float* const* out) {
  constexpr int U = RR * C >= 8 ? 1 : 8 / (RR * C);
  vf acc[U][RR][C] = {};
  int u = 0;
  for (; u + U <= T; u += U)
    for (int i = 0; i < U; i++) {
      const KV* vu = v + (u + i) * vpos + d0;
      prefetch_span(vu + AHEAD_POSITIONS * vpos, C * W);
      vf vv[C];
      for (int c = 0; c < C; c++) vv[c] = load_w(vu + c * W);
      for (int r = 0; r < RR; r++) {
        const float p = s[r][u + i];
        for (int c = 0; c < C; c++) acc[i][r][c] += p * vv[c];
      }
    }
  for (; u < T; u++)  // the last positions into the first sums
    for (int r = 0; r < RR; r++)
      for (int c = 0; c < C; c++) acc[0][r][c] += s[r][u] * load_w(v + u * vpos + d0 + c * W);
  for (int r = 0; r < RR; r++)
    for (int c = 0; c < C; c++) {
      vf sum = acc[0][r][c];
      for (int i = 1; i < U; i++) sum += acc[i][r][c];
      store(out[r] + d0 + c * W, sum);
    }
}

// RR rows of one head that read the same keys, transposed (dim-major, positions contiguous),
// and values (the cross-attention: one row, or beams over one window): scores in register tiles
// of RR rows x C vectors of positions, so each key and value vector is loaded and widened once
// for all the rows. Then per row the [first, last) mask and the softmax (weights copied out when
// asked), and the values' product in register tiles of RR rows x C vectors of dims. Dh is a
// multiple of W. q[r], s[r] (T floats of scratch), out[r], weights[r] (or null): per row.
template <int RR, typename KV>
void attend_shared(int T, int Dh, float scale, const float* const* q, const KV* kt, long kdim, const KV* v, long vpos,
                   const int* first, const int* last, float* const* s, float* const* out, float* const* weights) {
  constexpr int C = shared_vectors<RR>();
  float qs[RR * MAX_SHARED_DH];
  for (int r = 0; r < RR; r++)
    for (int d = 0; d < Dh; d++) qs[r * Dh + d] = q[r][d] * scale;
  int t = 0;
  for (; t + C * W <= T; t += C * W) shared_scores<RR, C>(Dh, qs, kt, kdim, t, W, s);
  for (; t + W <= T; t += W) shared_scores<RR, 1>(Dh, qs, kt, kdim, t, W, s);
  if (t < T) shared_scores<RR, 1>(Dh, qs, kt, kdim, t, T - t, s);  // the last positions
  for (int r = 0; r < RR; r++) {
    for (int u = 0; u < first[r] && u < T; u++) s[r][u] = -__builtin_inff();
    for (int u = last[r] > 0 ? last[r] : 0; u < T; u++) s[r][u] = -__builtin_inff();
    softmax_row(T, s[r]);
    if (weights[r]) memcpy(weights[r], s[r], T * sizeof(float));
  }
  int d0 = 0;  // dims in tiles of C vectors, then 4, 2, 1 (Dh 64: 4 zmm, 8 ymm)
  for (; d0 + C * W <= Dh; d0 += C * W) shared_values<RR, C>(T, d0, v, vpos, s, out);
  if (C > 4)
    for (; d0 + 4 * W <= Dh; d0 += 4 * W) shared_values<RR, (C > 4 ? 4 : 1)>(T, d0, v, vpos, s, out);
  if (C > 2)
    for (; d0 + 2 * W <= Dh; d0 += 2 * W) shared_values<RR, (C > 2 ? 2 : 1)>(T, d0, v, vpos, s, out);
  for (; d0 < Dh; d0 += W) shared_values<RR, 1>(T, d0, v, vpos, s, out);
}

// Rows sharing keys at a time in attend_shared (shared_vectors gives each its tile's width).
constexpr int SHARED_ROWS = 4;

// attend() for keys transposed and no `extra` position, Dh a multiple of W: rows that share
// their keys and values (row stride 0) in groups, others one at a time.
template <typename KV>
void attend_transposed(int R, int H, int Dh, float scale, const float* q, const KV* k, Strides ks, const KV* v,
                       Strides vs, int T, const int* lo, const int* hi, float* out, float* weights) {
  const int D = H * Dh;
  const bool shared = ks.row == 0 && vs.row == 0;
  const int group = shared ? SHARED_ROWS : 1;
  const int threads = (long)T * Dh * H >= (1L << 16) ? g_threads : 1;
  run_parts(H, threads, [&](int h) {
    std::vector<float> scratch((long)group * T);
    for (int r0 = 0; r0 < R; r0 += group) {
      const int rr = R - r0 < group ? R - r0 : group;
      const float* qs[SHARED_ROWS];
      float *ss[SHARED_ROWS], *os[SHARED_ROWS], *ws[SHARED_ROWS];
      int first[SHARED_ROWS], last[SHARED_ROWS];
      for (int i = 0; i < rr; i++) {
        const int r = r0 + i;
        qs[i] = q + (long)r * D + h * Dh;
        ss[i] = scratch.data() + (long)i * T;
        os[i] = out + (long)r * D + h * Dh;
        ws[i] = weights ? weights + ((long)r * H + h) * T : nullptr;
        first[i] = lo ? lo[r] : 0;
        last[i] = hi ? (hi[r] < T ? hi[r] : T) : T;
      }
      const KV* kh = k + r0 * ks.row + h * ks.head;
      const KV* vh = v + r0 * vs.row + h * vs.head;
      switch (rr) {
        case 4: attend_shared<4>(T, Dh, scale, qs, kh, ks.dim, vh, vs.pos, first, last, ss, os, ws); break;
        case 3: attend_shared<3>(T, Dh, scale, qs, kh, ks.dim, vh, vs.pos, first, last, ss, os, ws); break;
        case 2: attend_shared<2>(T, Dh, scale, qs, kh, ks.dim, vh, vs.pos, first, last, ss, os, ws); break;
        default: attend_shared<1>(T, Dh, scale, qs, kh, ks.dim, vh, vs.pos, first, last, ss, os, ws); break;
      }
    }
  });
}

// One query per row and head over T positions (and one more, `extra`, when given: the new
// token's own key/value in self-attention), in one pass: scores, masked softmax, values.
// q, extra_k, extra_v, out: (R, H*Dh); k, v: strided as given (v's dim stride is 1), float32
// or bfloat16 bits (T = uint16_t: the cross-attention's audio keys and values, half the bytes
// a step reads); lo/hi (R,) or null: the positions each row may see, [lo, hi) of the T (+1)
// positions; weights (R, H, T(+1)) or null: the probabilities, for word timing.
template <typename KV>
void attend(int R, int H, int Dh, float scale, const float* q, const KV* k, Strides ks, const KV* v,
            Strides vs, int T, const float* extra_k, const float* extra_v, const int* lo, const int* hi,
            float* out, float* weights) {
  if (ks.dim != 1 && ks.pos == 1 && vs.dim == 1 && !extra_k && Dh % W == 0 && Dh <= MAX_SHARED_DH && T > 0)
    return attend_transposed(R, H, Dh, scale, q, k, ks, v, vs, T, lo, hi, out, weights);
  const int total = T + (extra_k ? 1 : 0);
  const int D = H * Dh;
  const int threads = (long)T * Dh * H >= (1L << 16) ? g_threads : 1;  // the audio, not a short cache
  // heads outer, rows inner: rows that share their keys (beams over one window: row stride 0)
  // find a head's keys and values still in cache
  run_parts(H, threads, [&](int h) {
    std::vector<float> p(total + W);
    for (int r = 0; r < R; r++) {
      const int first = lo ? lo[r] : 0, last = hi ? (hi[r] < total ? hi[r] : total) : total;
      const float* qh = q + (long)r * D + h * Dh;
      const KV* kh = k + r * ks.row + h * ks.head;
      const KV* vh = v + r * vs.row + h * vs.head;
      float* s = p.data();
      if (ks.dim == 1) {  // keys position-major: a dot product per position
        for (int t = 0; t < T; t++) {
          const KV* kt = kh + t * ks.pos;
          prefetch_span(kt + AHEAD_POSITIONS * ks.pos, Dh);
          vf acc = {};
          int d = 0;
          for (; d + W <= Dh; d += W) acc += load(qh + d) * load_w(kt + d);
          float sum = hsum(acc);
          for (; d < Dh; d++) sum += qh[d] * tof(kt[d]);
          s[t] = sum * scale;
        }
      } else {  // keys transposed (dim-major, positions contiguous): axpy over positions
        const int tv = T - T % W;
        for (int t = 0; t < T; t++) s[t] = 0.0f;
        for (int d = 0; d < Dh; d++) {
          const KV* kd = kh + d * ks.dim;
          const float qd = qh[d] * scale;
          int t = 0;
          for (; t < tv; t += W) store(s + t, load(s + t) + qd * load_w(kd + t));
          for (; t < T; t++) s[t] += qd * tof(kd[t]);
        }
      }
      if (extra_k) {
        const float* e = extra_k + (long)r * D + h * Dh;
        float sum = 0.0f;
        for (int d = 0; d < Dh; d++) sum += qh[d] * e[d];
        s[T] = sum * scale;
      }
      for (int t = 0; t < first && t < total; t++) s[t] = -__builtin_inff();
      for (int t = last > 0 ? last : 0; t < total; t++) s[t] = -__builtin_inff();
      softmax_row(total, s);
      if (weights) memcpy(weights + ((long)r * H + h) * total, s, total * sizeof(float));
      float* o = out + (long)r * D + h * Dh;
      const int dv = Dh - Dh % W;
      for (int d = 0; d < Dh; d++) o[d] = 0.0f;
      for (int t = 0; t < T; t++) {
        if (s[t] == 0.0f) continue;  // masked (and underflowed) positions add nothing
        const KV* vt = vh + t * vs.pos;
        prefetch_span(vt + AHEAD_POSITIONS * vs.pos, Dh);
        const float pt = s[t];
        int d = 0;
        for (; d < dv; d += W) store(o + d, load(o + d) + pt * load_w(vt + d));
        for (; d < Dh; d++) o[d] += pt * tof(vt[d]);
      }
      if (extra_k && s[T] != 0.0f) {
        const float* vt = extra_v + (long)r * D + h * Dh;
        for (int d = 0; d < Dh; d++) o[d] += s[T] * vt[d];
      }
    }
  });
}

// Encoder self-attention for RR query rows of one head, in one pass over L1-sized tiles:
// scores (RR x S, register tiles of RR rows x 4 vectors of positions), softmax per row, then
// the product with the values. q rows at stride D; kt (Dh, S) the head's keys transposed; v (S,
// Dh); out rows at stride D; s: scratch of RR x Sp floats (Sp = S rounded up to W).
template <int RR>
void encoder_rows(int S, int Sp, int D, int Dh, float scale, const float* q, const float* kt, const float* v,
                  float* out, float* s) {
  int t = 0;
  for (; t + 4 * W <= S; t += 4 * W) {
    vf acc[RR][4] = {};
    for (int d = 0; d < Dh; d++) {
      const float* kd = kt + (long)d * S + t;
      vf k[4] = {load(kd), load(kd + W), load(kd + 2 * W), load(kd + 3 * W)};
      for (int r = 0; r < RR; r++) {
        const float qr = q[(long)r * D + d] * scale;
        for (int c = 0; c < 4; c++) acc[r][c] += qr * k[c];
      }
    }
    for (int r = 0; r < RR; r++)
      for (int c = 0; c < 4; c++) store(s + (long)r * Sp + t + c * W, acc[r][c]);
  }
  for (; t < S; t += W) {  // the last positions, a vector at a time (zero-padded past S)
    const int valid = S - t < W ? S - t : W;
    vf acc[RR] = {};
    for (int d = 0; d < Dh; d++) {
      float tmp[W] = {};
      memcpy(tmp, kt + (long)d * S + t, valid * sizeof(float));
      vf kd = load(tmp);
      for (int r = 0; r < RR; r++) acc[r] += (q[(long)r * D + d] * scale) * kd;
    }
    for (int r = 0; r < RR; r++) store(s + (long)r * Sp + t, acc[r]);
  }
  for (int r = 0; r < RR; r++) softmax_row(S, s + (long)r * Sp);
  for (int d0 = 0; d0 < Dh; d0 += 4 * W) {
    const int nv = (Dh - d0) / W < 4 ? (Dh - d0) / W : 4;
    vf acc[RR][4] = {};
    for (int u = 0; u < S; u++) {
      const float* vu = v + (long)u * Dh + d0;
      vf vv[4];
      for (int c = 0; c < nv; c++) vv[c] = load(vu + c * W);
      for (int r = 0; r < RR; r++) {
        const float p = s[(long)r * Sp + u];
        for (int c = 0; c < nv; c++) acc[r][c] += p * vv[c];
      }
    }
    for (int r = 0; r < RR; r++)
      for (int c = 0; c < nv; c++) store(out + (long)r * D + d0 + c * W, acc[r][c]);
  }
}

constexpr int ENCODER_ROWS = S == 1 ? 6 : 3;  // RR * 4 accumulators + 4 keys in the registers

// Full self-attention of S positions, H heads of Dh (a multiple of the vector width):
// q (S, H*Dh), kt (H, Dh, S), v (H, S, Dh) -> out (S, H*Dh). No mask (the encoder has none).
void encoder_attention(int S, int H, int Dh, const float* q, const float* kt, const float* v, float* out,
                       int threads) {
  const int D = H * Dh, Sp = (S + W - 1) / W * W;
  const float scale = 1.0f / __builtin_sqrtf((float)Dh);
  const int blocks = (S + ENCODER_ROWS - 1) / ENCODER_ROWS;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    std::vector<float> s((long)ENCODER_ROWS * Sp);
#pragma omp for collapse(2) schedule(static)
    for (int h = 0; h < H; h++)
      for (int b = 0; b < blocks; b++) {
        const int r0 = b * ENCODER_ROWS;
        const float *qh = q + (long)r0 * D + h * Dh, *kh = kt + (long)h * Dh * S, *vh = v + (long)h * S * Dh;
        float* oh = out + (long)r0 * D + h * Dh;
        if (r0 + ENCODER_ROWS <= S) {
          encoder_rows<ENCODER_ROWS>(S, Sp, D, Dh, scale, qh, kh, vh, oh, s.data());
        } else {
          for (int r = r0; r < S; r++)
            encoder_rows<1>(S, Sp, D, Dh, scale, q + (long)r * D + h * Dh, kh, vh, out + (long)r * D + h * Dh,
                            s.data());
        }
      }
  }
}

// A decoder layer's weights: linears (N, K) in wtype, biases and norms float32.
struct Layer {
  const void *wq, *wk, *wv, *wo, *cwq, *cwo, *w1, *w2;
  const float *bq, *bv, *bo, *cbq, *cbo, *b1, *b2;
  const float *ln1_g, *ln1_b, *ln2_g, *ln2_b, *ln3_g, *ln3_b;
};

}  // namespace

EXPORT void TK(set_threads)(int n) { g_threads = n < 1 ? 1 : n; }

EXPORT int TK(encoder_attention)(int S, int H, int Dh, const float* q, const float* kt, const float* v, float* out) {
  if (Dh % W != 0) return 1;  // the values' product needs whole vectors: the caller uses MLX
  encoder_attention(S, H, Dh, q, kt, v, out, g_threads);
  return 0;
}

// The same with its own thread count (the native encoder runs with the BLAS's threads, the
// decoder step with g_threads).
EXPORT int TK(encoder_attention_threads)(int S, int H, int Dh, const float* q, const float* kt, const float* v,
                                         float* out, int threads) {
  if (Dh % W != 0) return 1;
  encoder_attention(S, H, Dh, q, kt, v, out, threads < 1 ? 1 : threads);
  return 0;
}

EXPORT void TK(linear)(int R, int K, int N, const float* x, const void* w, int wtype, const float* b,
                       const float* res, float* y) {
  linear(R, K, N, x, w, wtype, b, res, y);
}

// w (N, K) float32 -> the packed layout linear() reads, (ceil(N/16), K, 16), zero-padded, in
// wtype (1: bfloat16, rounded to nearest even as MLX rounds; 0: float32). Done once per weight.
EXPORT void TK(pack)(int N, int K, const float* w, int wtype, void* out) {
  const int blocks = (N + LANES - 1) / LANES;
  for (int j = 0; j < blocks; j++)
    for (int k = 0; k < K; k++)
      for (int i = 0; i < LANES; i++) {
        const int n = j * LANES + i;
        const float v = n < N ? w[(long)n * K + k] : 0.0f;
        const long at = ((long)j * K + k) * LANES + i;
        if (wtype == 1) {
          uint32_t u;
          memcpy(&u, &v, 4);
          ((uint16_t*)out)[at] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
        } else {
          ((float*)out)[at] = v;
        }
      }
}

// float32 -> bfloat16 bits, rounded to nearest even (as ``pack`` and MLX round): n values.
EXPORT void TK(to_bf16)(long n, const float* x, uint16_t* y) {
  for (long i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, x + i, 4);
    y[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}

// y (R, N) = x (R, K) w^T for a float32 weight (N, K) as it is stored, row-major, unpacked (the
// tied vocabulary projection of a prompt pass's few rows, kept float32: the no-speech
// probability is read there): each weight row read once for all R rows (<= 8), a dot product
// per row and output. Memory-bound: threads over the outputs.
namespace {
template <int R>
void dot_rows_range(int K, int n0, int n1, const float* x, const float* w, float* y, int N) {
  const int kv = K - K % W;
  for (int n = n0; n < n1; n++) {
    const float* wn = w + (long)n * K;
    vf acc[R] = {};
    for (int k = 0; k < kv; k += W) {
      const vf wv = load(wn + k);
      for (int r = 0; r < R; r++) acc[r] += load(x + (long)r * K + k) * wv;
    }
    for (int r = 0; r < R; r++) {
      float sum = hsum(acc[r]);
      for (int k = kv; k < K; k++) sum += x[(long)r * K + k] * wn[k];
      y[(long)r * N + n] = sum;
    }
  }
}
}  // namespace

EXPORT void TK(dot_rows)(int R, int K, int N, const float* x, const float* w, float* y, int threads) {
  threads = threads < 1 ? 1 : threads;
  for (int r0 = 0; r0 < R; r0 += 4) {  // 4 rows at a time: their accumulators in the registers
    const int rows = R - r0 < 4 ? R - r0 : 4;
    const float* xr = x + (long)r0 * K;
    float* yr = y + (long)r0 * N;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
    for (int t = 0; t < threads; t++) {
      const int per = (N + threads - 1) / threads, n0 = t * per, n1 = n0 + per < N ? n0 + per : N;
      if (n0 >= n1) continue;
      switch (rows) {
        case 4: dot_rows_range<4>(K, n0, n1, xr, w, yr, N); break;
        case 3: dot_rows_range<3>(K, n0, n1, xr, w, yr, N); break;
        case 2: dot_rows_range<2>(K, n0, n1, xr, w, yr, N); break;
        default: dot_rows_range<1>(K, n0, n1, xr, w, yr, N); break;
      }
    }
  }
}

EXPORT void TK(layer_norm)(int R, int D, const float* x, const float* g, const float* b, float eps, float* y) {
  layer_norm(R, D, x, g, b, eps, y);
}

EXPORT void TK(gelu)(long n, const float* x, float* y) { gelu(n, x, y); }

EXPORT void TK(softmax)(long R, int N, float* s) {
  for (long r = 0; r < R; r++) softmax_row(N, s + r * N);
}

EXPORT void TK(attend)(int R, int H, int Dh, float scale, const float* q, const float* k, const long* k_strides,
                       const float* v, const long* v_strides, int T, const float* extra_k, const float* extra_v,
                       const int* lo, const int* hi, float* out, float* weights) {
  Strides ks{k_strides[0], k_strides[1], k_strides[2], k_strides[3]};
  Strides vs{v_strides[0], v_strides[1], v_strides[2], v_strides[3]};
  attend(R, H, Dh, scale, q, k, ks, v, vs, T, extra_k, extra_v, lo, hi, out, weights);
}

// The same with keys and values in bfloat16 bits (the decoder layer's cross-attention).
EXPORT void TK(attend_bf16)(int R, int H, int Dh, float scale, const float* q, const uint16_t* k,
                            const long* k_strides, const uint16_t* v, const long* v_strides, int T,
                            const float* extra_k, const float* extra_v, const int* lo, const int* hi, float* out,
                            float* weights) {
  Strides ks{k_strides[0], k_strides[1], k_strides[2], k_strides[3]};
  Strides vs{v_strides[0], v_strides[1], v_strides[2], v_strides[3]};
  attend(R, H, Dh, scale, q, k, ks, v, vs, T, extra_k, extra_v, lo, hi, out, weights);
}

// One decoder layer for one new token per row: x (R, D) in place.
// Self-attention over the cache (T positions, strides kc_s/vc_s) plus the token itself, whose
// key and value land in k_new, v_new (R, D) (the caller appends them to its cache); pad (R,)
// or null: cached positions each row may not see. Cross-attention over S audio positions
// (keys transposed), float32 or (cross_bf16) bfloat16 bits, audio_len (R,) or null; cross_w
// (R, H, S) or null: its weights.
EXPORT void TK(decoder_layer)(const Layer* L, int wtype, int R, int D, int H, float* x, const float* kc,
                              const long* kc_s, const float* vc, const long* vc_s, int T, const int* pad,
                              float* k_new, float* v_new, const void* ckt, const long* ckt_s, const void* cv,
                              const long* cv_s, int S, const int* audio_len, float* cross_w, int cross_bf16) {
  const int Dh = D / H;
  const float scale = 1.0f / __builtin_sqrtf((float)Dh);
  std::vector<float> buf((long)R * (3 * D + 4 * D));
  float *h = buf.data(), *q = h + (long)R * D, *o = q + (long)R * D, *m = o + (long)R * D;
  Strides none{0, 0, 0, 1};
  Strides ks = kc ? Strides{kc_s[0], kc_s[1], kc_s[2], kc_s[3]} : none;
  Strides vs = vc ? Strides{vc_s[0], vc_s[1], vc_s[2], vc_s[3]} : none;
  layer_norm(R, D, x, L->ln1_g, L->ln1_b, 1e-5f, h);
  linear(R, D, D, h, L->wq, wtype, L->bq, nullptr, q);
  linear(R, D, D, h, L->wk, wtype, nullptr, nullptr, k_new);
  linear(R, D, D, h, L->wv, wtype, L->bv, nullptr, v_new);
  attend(R, H, Dh, scale, q, kc, ks, vc, vs, kc ? T : 0, k_new, v_new, pad, nullptr, o, nullptr);
  linear(R, D, D, o, L->wo, wtype, L->bo, x, x);
  layer_norm(R, D, x, L->ln2_g, L->ln2_b, 1e-5f, h);
  linear(R, D, D, h, L->cwq, wtype, L->cbq, nullptr, q);
  Strides cks{ckt_s[0], ckt_s[1], ckt_s[2], ckt_s[3]}, cvs{cv_s[0], cv_s[1], cv_s[2], cv_s[3]};
  if (cross_bf16)
    attend(R, H, Dh, scale, q, (const uint16_t*)ckt, cks, (const uint16_t*)cv, cvs, S, nullptr, nullptr, nullptr,
           audio_len, o, cross_w);
  else
    attend(R, H, Dh, scale, q, (const float*)ckt, cks, (const float*)cv, cvs, S, nullptr, nullptr, nullptr,
           audio_len, o, cross_w);
  linear(R, D, D, o, L->cwo, wtype, L->cbo, x, x);
  layer_norm(R, D, x, L->ln3_g, L->ln3_b, 1e-5f, h);
  linear(R, D, 4 * D, h, L->w1, wtype, L->b1, nullptr, m);
  gelu((long)R * 4 * D, m, m);
  linear(R, 4 * D, D, m, L->w2, wtype, L->b2, x, x);
}
