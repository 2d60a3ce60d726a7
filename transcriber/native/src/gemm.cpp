// The encoder's GEMM in bfloat16: C (M, N) = A (M, K) W (N, K)^T + bias, then GELU or a residual.
//
// M is long (1500 audio positions a 30 s window), K and N a few hundred to a few thousand: the
// encoder's linears and its two convolutions (as im2col products: a row of A is K = 3 x C_in
// consecutive floats of the padded input, so A is the input itself read at a stride of
// stride x C_in, rows overlapping). A is rounded to bfloat16 once per call, W once per model
// (gemm_pack); products are summed in float32.
//
// Pairs of k: bfloat16 pairs (k, k+1) share one 32-bit word, low half the even k, as
// AVX-512 BF16's vdpbf16ps reads them: one instruction multiplies 16 columns by a pair and adds
// both products into float32 lanes (twice the multiply-adds of a float32 FMA). Where the CPU
// lacks it (or the caller asks: `dot` 0; the only route of the avx2 and portable paths), the
// same rounded values run as float32 FMAs: A's rows rounded to bf16 and widened once per call,
// W's panels widened once per call (N x K floats, 1/M of the products' work), then register
// tiles that only load, broadcast and FMA (6 rows x 16 columns on AVX2: 12 accumulators, 2
// weight vectors, 1 broadcast of the 16 ymm). Widening inside the tile, as before, cost a shift
// or mask per weight vector and a move + broadcast per row: 72% of FMA peak on Zen 5, ~1/3 on
// Zen 3 (issue 30); docs/speed.md has the figures.
//
// Layouts: A pairs (M, P) uint32, P = ceil(K/2); W packed (ceil(N/16), P, 16) uint32, columns
// past N zero. Widened: A (M, 2P) float32, W (ceil(N/16), 2P, 16) float32 (k even, odd, ...).

#include <type_traits>

#include "vec.h"

namespace {

inline uint32_t to_bf16(float v) {  // round to nearest even, as MLX rounds
  uint32_t u;
  memcpy(&u, &v, 4);
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
}

inline float round_bf16(float v) {  // v rounded to bf16, as a float32
  const uint32_t u = to_bf16(v) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline vf round_bf16(vf v) {  // the same, a vector at a time
  vu u;
  memcpy(&u, &v, sizeof u);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&v, &u, sizeof v);
  return v;
}

#if defined(TK_BF16)  // the vdpbf16ps route's A
// Rows of A (at stride lda floats) times scale -> bf16 pairs (M, P), a zero in the odd K's
// last half.
void pack_rows(int M, int K, const float* a, long lda, uint32_t* out, int threads, float scale = 1.0f) {
  const int P = (K + 1) / 2;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int m = 0; m < M; m++) {
    const float* r = a + (long)m * lda;
    uint32_t* o = out + (long)m * P;
    for (int p = 0; p < K / 2; p++) o[p] = to_bf16(scale * r[2 * p]) | (to_bf16(scale * r[2 * p + 1]) << 16);
    if (K % 2) o[P - 1] = to_bf16(scale * r[K - 1]);
  }
}
#endif

// Rows rounded to bf16 but kept as float32 (M, 2P), a zero past K: the FMA route's A.
void pack_rows(int M, int K, const float* a, long lda, float* out, int threads, float scale = 1.0f) {
  const int K2 = (K + 1) / 2 * 2;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int m = 0; m < M; m++) {
    const float* r = a + (long)m * lda;
    float* o = out + (long)m * K2;
    int k = 0;
    for (; k + W <= K; k += W) store(o + k, round_bf16(load(r + k) * scale));
    for (; k < K; k++) o[k] = round_bf16(scale * r[k]);
    if (K < K2) o[K] = 0.0f;
  }
}

// Packed bf16 pairs (blocks, P, 16) -> float32 (blocks, 2P, 16): each word's low half (k even)
// then its high half (k odd), a 16-bit shift and a mask.
void widen_panels(long blocks, int P, const uint32_t* w, float* out, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (long j = 0; j < blocks; j++)
    for (int p = 0; p < P; p++) {
      const uint32_t* src = w + (j * P + p) * LANES;
      uint32_t lo[LANES], hi[LANES];
      for (int i = 0; i < LANES; i++) {
        lo[i] = src[i] << 16;
        hi[i] = src[i] & 0xFFFF0000u;
      }
      float* o = out + (j * P + p) * 2 * LANES;
      memcpy(o, lo, sizeof lo);
      memcpy(o + LANES, hi, sizeof hi);
    }
}

struct Epilogue {
  const float* bias;  // (N,) or null
  const float* res;   // (M, N) at stride ldr, or null; may be c (in place)
  long ldr;
  int gelu;
  float* c;
  long ldc;
  int N;
};

// 16 columns from n0 of row m: + bias, GELU, + residual, stored (only columns < N).
inline void finish(const Epilogue& e, int m, int n0, vf* acc) {
  for (int s = 0; s < S; s++) {
    const int n = n0 + s * W;
    if (n >= e.N) return;
    const float* r = e.res ? e.res + m * e.ldr + n : nullptr;
    float* c = e.c + m * e.ldc + n;
    if (n + W <= e.N) {  // a whole vector
      vf v = acc[s];
      if (e.bias) v += load(e.bias + n);
      if (e.gelu) v = vgelu(v);
      if (r) v += load(r);
      store(c, v);
      continue;
    }
    float t[W];
    memcpy(t, &acc[s], sizeof t);
    const int valid = e.N - n;
    if (e.bias)
      for (int i = 0; i < valid; i++) t[i] += e.bias[n + i];
    vf v = load(t);
    if (e.gelu) v = vgelu(v);
    memcpy(t, &v, sizeof t);
    for (int i = 0; i < valid; i++) c[i] = t[i] + (r ? r[i] : 0.0f);
  }
}

// An MR x (NB x 16) tile of float32 FMAs over K2 widened k's: A's rows at stride K2, W's
// panels bstride apart. Every path has this one.
template <int MR, int NB>
void tile(int K2, const float* a, const float* w, long bstride, int m0, int n0, const Epilogue& e) {
  constexpr int V = NB * S;
  vf acc[MR][V] = {};
  for (int k = 0; k < K2; k++) {
    vf wv[V];
    for (int c = 0; c < V; c++) wv[c] = load(w + (c / S) * bstride + (long)k * LANES + (c % S) * W);
    for (int r = 0; r < MR; r++) {
      const float x = a[(long)r * K2 + k];
      for (int c = 0; c < V; c++) acc[r][c] += x * wv[c];
    }
  }
  for (int r = 0; r < MR; r++)
    for (int b = 0; b < NB; b++) finish(e, m0 + r, n0 + b * LANES, &acc[r][b * S]);
}

#if defined(TK_BF16)
// The same tile with vdpbf16ps (AVX-512 BF16): one instruction per 16 columns and k pair.
template <int MR, int NB>
__attribute__((target("avx512bf16"))) void tile(int P, const uint32_t* a, const uint32_t* w, long bstride, int m0,
                                               int n0, const Epilogue& e) {
  __m512 acc[MR][NB];
  for (int r = 0; r < MR; r++)
    for (int c = 0; c < NB; c++) acc[r][c] = _mm512_setzero_ps();
  for (int p = 0; p < P; p++) {
    __m512i wv[NB];
    for (int c = 0; c < NB; c++) wv[c] = _mm512_loadu_si512(w + c * bstride + (long)p * LANES);
    for (int r = 0; r < MR; r++) {
      const __m512i x = _mm512_set1_epi32((int)a[(long)r * P + p]);
      for (int c = 0; c < NB; c++) acc[r][c] = _mm512_dpbf16_ps(acc[r][c], (__m512bh)x, (__m512bh)wv[c]);
    }
  }
  for (int r = 0; r < MR; r++)
    for (int c = 0; c < NB; c++) {
      vf v = (vf)acc[r][c];
      finish(e, m0 + r, n0 + c * LANES, &v);
    }
}
#endif

// Tile shapes: rows x 16-column blocks, as many accumulators as the registers hold: 32 zmm,
// 6 x 4 (vdpbf16ps on pairs, or FMAs); 16 ymm, 6 x 1 (two ymm a block); 16 xmm (SSE), 3 x 1;
// 32 NEON q registers, 6 x 1 (24 accumulators, 4 weight vectors, 1 broadcast).
#if defined(__aarch64__)
constexpr int XMM_ROWS = 6;
#else
constexpr int XMM_ROWS = 3;
#endif
constexpr int TILE_MR = S == 4 ? XMM_ROWS : 6, TILE_NB = S == 1 ? 4 : 1;

template <int NB, typename T>
void tile_rows(int mr, int count, const T* a, const T* w, long bstride, int m0, int n0, const Epilogue& e) {
  switch (mr) {
    case 6: return tile<6, NB>(count, a, w, bstride, m0, n0, e);
    case 5: return tile<5, NB>(count, a, w, bstride, m0, n0, e);
    case 4: return tile<4, NB>(count, a, w, bstride, m0, n0, e);
    case 3: return tile<3, NB>(count, a, w, bstride, m0, n0, e);
    case 2: return tile<2, NB>(count, a, w, bstride, m0, n0, e);
    default: return tile<1, NB>(count, a, w, bstride, m0, n0, e);
  }
}

// Row blocks of this many rows keep their A rows in L2 while every column block passes.
constexpr int ROW_BLOCK = 96;

// One block of rows [m0, m1) against the column blocks [j0, j1), whose panels start at w:
// column panels outer (a panel of weights stays in L1/L2 for all the block's tiles), tiles of
// rows inner. T: uint32_t (bf16 pairs, vdpbf16ps) or float (widened, FMAs); count: elements of
// T along k (P or 2P); a: row m0's. A column's sums do not depend on the columns beside it in
// a tile: any split of the column blocks gives the same floats.
template <typename T>
void row_block(int m0, int m1, int count, int j0, int j1, const T* a, const T* w, const Epilogue& e) {
  constexpr int MR = TILE_MR, NB = TILE_NB;
  const long bstride = (long)count * LANES;
  for (int j = j0; j < j1; j += NB) {
    const int blocks = j1 - j < NB ? j1 - j : NB;
    const T* wj = w + (j - j0) * bstride;
    for (int m = m0; m < m1; m += MR) {
      const int mr = m1 - m < MR ? m1 - m : MR;
      const T* am = a + (long)(m - m0) * count;
      switch (blocks) {
        case 4: tile_rows<4 <= NB ? 4 : 1>(mr, count, am, wj, bstride, m, j * LANES, e); break;
        case 3: tile_rows<3 <= NB ? 3 : 1>(mr, count, am, wj, bstride, m, j * LANES, e); break;
        case 2: tile_rows<2 <= NB ? 2 : 1>(mr, count, am, wj, bstride, m, j * LANES, e); break;
        default: tile_rows<1>(mr, count, am, wj, bstride, m, j * LANES, e); break;
      }
    }
  }
}

// Elements of T per bf16 pair: 1 packed word, or 2 widened floats.
template <typename T>
constexpr int per_pair() {
  return std::is_same<T, float>::value ? 2 : 1;
}

// A thread's scratch buffer `slot` of at least n elements, kept between calls (OpenMP's threads
// persist): a fresh allocation per call cost its page faults and zeroing, ~20% of a 384 x 384
// product. Slots: 0 a row block's A, 1 the caller's widened weights, 2-3 attention's rows.
template <typename T>
T* scratch(int slot, long n) {
  static thread_local std::vector<T> buffers[4];
  std::vector<T>& b = buffers[slot];
  if ((long)b.size() < n) b.resize(n);
  return b.data();
}

// W's packed pairs as route T reads them: as they are, or widened into the calling thread's
// slot 1 (column blocks [j0, j1)).
template <typename T>
const T* route_weights(int j0, int j1, int P, const uint32_t* w, int threads) {
  if (per_pair<T>() == 1) return (const T*)(w + (long)j0 * P * LANES);
  float* out = scratch<float>(1, (long)(j1 - j0) * P * 2 * LANES);
  widen_panels(j1 - j0, P, w + (long)j0 * P * LANES, out, threads);
  return (const T*)out;
}

// C = A x W^T + epilogue on route T: row blocks over the threads, each block's rows rounded
// (pack_rows) into its thread's scratch, hot in L2 for its tiles, W as the route reads it
// (widened once for all blocks). Fewer than two row blocks a thread (a prompt pass's 10-200
// tokens: one or two) split the columns too, in parts of whole tiles, so that every thread has
// work: each part widens its own columns (in its thread, no barrier more). Not under 16 rows,
// where a second thread cost more than it saved (8 rows x 384 x 1536: 149 -> 175 us).
struct Split {  // a product's work items: row blocks x parts of the column blocks
  int M, nb, rows, blocks, parts, tiles;  // rows: a block's (<= ROW_BLOCK)
  int items() const { return blocks * parts; }
  // item's rows [m0, m1) and column blocks [j0, j1)
  void range(int item, int& m0, int& m1, int& j0, int& j1) const {
    const int b = item / parts, part = item % parts;
    m0 = b * rows;
    m1 = m0 + rows < M ? m0 + rows : M;
    j0 = (int)((long)tiles * part / parts) * TILE_NB;
    const int j1e = (int)((long)tiles * (part + 1) / parts) * TILE_NB;
    j1 = j1e < nb ? j1e : nb;
  }
};

// Row blocks over the threads; fewer than two a thread (and at least 16 rows) split the
// column blocks too, in parts of whole tiles (tiles of TILE_NB blocks). Past one block, a
// multiple of `threads` blocks of equal rows (whole tiles, at most ROW_BLOCK): 350
// rows on 2 threads are 4 x 90, not 3 x 96 + 62 (192 rows on one thread, 158 on the other).
// A row's sums do not depend on its block: any split gives the same floats. mr: the tile's rows.
inline Split split(int M, int nb, int threads, int mr = TILE_MR) {
  int blocks = (M + ROW_BLOCK - 1) / ROW_BLOCK, rows = ROW_BLOCK;
  if (blocks > 1 && threads > 1) {
    blocks = (blocks + threads - 1) / threads * threads;
    rows = ((M + blocks - 1) / blocks + mr - 1) / mr * mr;
    rows = rows < ROW_BLOCK ? rows : ROW_BLOCK;
    blocks = (M + rows - 1) / rows;
  }
  const int tiles = (nb + TILE_NB - 1) / TILE_NB;
  int parts = threads > 1 && blocks < 2 * threads && M >= 16 ? (2 * threads + blocks - 1) / blocks : 1;
  if (parts > tiles) parts = tiles;
  return {M, nb, rows, blocks, parts, tiles};
}

template <typename T>
void gemm_route(int M, int K, int nb, const float* a, long lda, const uint32_t* w, const Epilogue& e, int threads) {
  const int P = (K + 1) / 2, count = P * per_pair<T>();
  const Split s = split(M, nb, threads);
  const int items = s.items();
  const T* whole = s.parts == 1 ? route_weights<T>(0, nb, P, w, items > 1 ? threads : 1) : nullptr;
#pragma omp parallel for num_threads(threads) schedule(dynamic) if (threads > 1 && items > 1)
  for (int item = 0; item < items; item++) {
    int m0, m1, j0, j1;
    s.range(item, m0, m1, j0, j1);
    const T* wt = whole ? whole + (long)j0 * count * LANES : route_weights<T>(j0, j1, P, w, 1);
    T* rows = scratch<T>(0, (long)ROW_BLOCK * count);
    pack_rows(m1 - m0, K, a + m0 * lda, lda, rows, 1);
    row_block(m0, m1, count, j0, j1, rows, wt, e);
  }
}

}  // namespace

// Whether this path was built with vdpbf16ps (the caller also needs the CPU to have it).
EXPORT int TK(gemm_has_dot)() {
#if defined(TK_BF16)
  return 1;
#else
  return 0;
#endif
}

namespace {
// w[n, k] at w + n * sn + k * sk -> packed (ceil(N/16), P, 16) bf16 pairs, zero-padded.
void pack_weight(int N, int K, const float* w, long sn, long sk, uint32_t* out) {
  const int P = (K + 1) / 2, blocks = (N + LANES - 1) / LANES;
  for (int j = 0; j < blocks; j++)
    for (int p = 0; p < P; p++)
      for (int i = 0; i < LANES; i++) {
        const int n = j * LANES + i;
        uint32_t word = 0;
        if (n < N) {
          const float* r = w + n * sn + 2L * p * sk;
          word = to_bf16(r[0]) | (2 * p + 1 < K ? to_bf16(r[sk]) << 16 : 0u);
        }
        out[((long)j * P + p) * LANES + i] = word;
      }
}
}  // namespace

// w (N, K) float32 row-major -> packed (ceil(N/16), P, 16) bf16 pairs. Once per weight.
EXPORT void TK(gemm_pack)(int N, int K, const float* w, uint32_t* out) { pack_weight(N, K, w, K, 1, out); }

// c (M, N) at stride ldc = a (M, K; rows at stride lda, may overlap) x w^T + bias, then GELU
// (gelu != 0), then + res (stride ldr; may be c). dot: 1 for vdpbf16ps (when built), else
// widening. threads: OpenMP threads over blocks of rows. Returns 1 when dot was asked and
// this path lacks it.
EXPORT int TK(gemm)(int M, int N, int K, const float* a, long lda, const uint32_t* w, const float* bias,
                    const float* res, long ldr, int gelu, float* c, long ldc, int dot, int threads) {
#if !defined(TK_BF16)
  if (dot) return 1;
#endif
  const int nb = (N + LANES - 1) / LANES;
  threads = threads < 1 ? 1 : threads;
  const Epilogue e{bias, res, ldr, gelu, c, ldc, N};
#if defined(TK_BF16)
  if (dot) {
    gemm_route<uint32_t>(M, K, nb, a, lda, w, e, threads);
    return 0;
  }
#endif
  gemm_route<float>(M, K, nb, a, lda, w, e, threads);
  return 0;
}

// Rows of attention at a time: their float32 scores (48 x 1500) and bf16 probabilities stay in L2.
constexpr int ATTENTION_ROWS = 48;

EXPORT int TK(attention_packed)(int T, int H, int Dh, const float* q, long ldq, const uint32_t* keys,
                                const uint32_t* values, int N, int causal, float* out, long ldo, float* weights,
                                int dot, int threads);

// Unmasked self-attention on the bf16 GEMM: per head, scores = (scale q) k^T, softmax in
// float32, then probabilities x values, 48 query rows at a time. qkv (S, 3D) at row stride ld
// (query, key, value side by side, heads of Dh inside each); out (S, D) at row stride ldo.
EXPORT int TK(attention_bf16)(int S, int H, int Dh, const float* qkv, long ld, float* out, long ldo, int dot,
                              int threads) {
#if !defined(TK_BF16)
  if (dot) return 1;
#endif
  const int D = H * Dh, Pq = (Dh + 1) / 2, Ps = (S + 1) / 2;
  const int nbs = (S + LANES - 1) / LANES, nbd = (Dh + LANES - 1) / LANES;
  const long kw = (long)nbs * Pq * LANES, vw = (long)nbd * Ps * LANES;
  std::vector<uint32_t> keys(H * kw), values(H * vw);
  threads = threads < 1 ? 1 : threads;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int h = 0; h < H; h++) {
    pack_weight(S, Dh, qkv + D + h * Dh, ld, 1, keys.data() + h * kw);           // n: position, k: dim
    pack_weight(Dh, S, qkv + 2 * D + h * Dh, 1, ld, values.data() + h * vw);     // n: dim, k: position
  }
  // the prompt pass's kernel over these packed heads, every position seen, no weights kept
  return TK(attention_packed)(S, H, Dh, qkv, ld, keys.data(), values.data(), S, -1, out, ldo, nullptr, dot, threads);
}

// Per head, a float32 operand packed as gemm_pack packs a weight: head h's w[n, k] at
// src + h * sh + n * sn + k * sk (strides in floats) -> out + h * ceil(N/16) * ceil(K/2) * 16.
// A prompt pass's keys (n: position, k: dim) and values (n: dim, k: position) per head.
EXPORT void TK(gemm_pack_heads)(int H, int N, int K, const float* src, long sh, long sn, long sk, uint32_t* out,
                                int threads) {
  const long per = (long)((N + LANES - 1) / LANES) * ((K + 1) / 2) * LANES;
  threads = threads < 1 ? 1 : threads;
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int h = 0; h < H; h++) pack_weight(N, K, src + h * sh, sn, sk, out + h * per);
}

namespace {
// attention_packed on one route (T: uint32_t pairs for vdpbf16ps, float widened for FMAs): the
// float route widens a head's keys and values into the thread's slot 1 when its next block is
// another head's (one head's, not all: 0.8 MB kept a thread, not 4.6, for tiny.en's window).
template <typename T>
void attention_route(int T_, int H, int Dh, const float* q, long ldq, const uint32_t* keys, const uint32_t* values,
                     int N, int causal, float* out, long ldo, float* weights, int threads) {
  const int Pq = (Dh + 1) / 2, Pn = (N + 1) / 2, cq = Pq * per_pair<T>(), cn = Pn * per_pair<T>();
  const int nbn = (N + LANES - 1) / LANES, nbd = (Dh + LANES - 1) / LANES;
  const long kp = (long)nbn * Pq * LANES, vp = (long)nbd * Pn * LANES;  // packed words a head
  const long kw = kp * per_pair<T>(), vw = vp * per_pair<T>();         // the route's elements a head
  const float scale = 1.0f / __builtin_sqrtf((float)Dh);
  const int blocks = (T_ + ATTENTION_ROWS - 1) / ATTENTION_ROWS;
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    T* qp = scratch<T>(0, (long)ATTENTION_ROWS * cq);
    T* p = scratch<T>(2, (long)ATTENTION_ROWS * cn);
    float* s = scratch<float>(3, (long)ATTENTION_ROWS * N);
    float* wide = per_pair<T>() == 2 ? scratch<float>(1, kw + vw) : nullptr;
    const T *kt = nullptr, *vt = nullptr;
    int head = -1;
#pragma omp for collapse(2) schedule(dynamic)
    for (int h = 0; h < H; h++)
      for (int b = 0; b < blocks; b++) {
        if (h != head) {
          head = h;
          kt = (const T*)(keys + h * kp);
          vt = (const T*)(values + h * vp);
          if (wide) {
            widen_panels(nbn, Pq, keys + h * kp, wide, 1);
            widen_panels(nbd, Pn, values + h * vp, wide + kw, 1);
            kt = (const T*)wide;
            vt = (const T*)(wide + kw);
          }
        }
        const int m0 = b * ATTENTION_ROWS, rows = T_ - m0 < ATTENTION_ROWS ? T_ - m0 : ATTENTION_ROWS;
        pack_rows(rows, Dh, q + m0 * ldq + h * Dh, ldq, qp, 1, scale);
        const Epilogue scores{nullptr, nullptr, 0, 0, s, N, N};
        row_block(0, rows, cq, 0, nbn, qp, kt, scores);
        for (int r = 0; r < rows; r++) {
          float* sr = s + (long)r * N;
          for (int n = causal < 0 ? N : causal + m0 + r + 1; n < N; n++) sr[n] = -__builtin_inff();
          softmax_row(N, sr);
          if (weights) memcpy(weights + ((long)h * T_ + m0 + r) * N, sr, N * sizeof(float));
        }
        pack_rows(rows, N, s, N, p, 1);
        const Epilogue o{nullptr, nullptr, 0, 0, out + m0 * ldo + h * Dh, ldo, Dh};
        row_block(0, rows, cn, 0, nbd, p, vt, o);
      }
  }
}
}  // namespace

// Attention of T query rows over N positions per head on the bf16 GEMM (a decoder prompt pass),
// keys and values packed per head by gemm_pack_heads (keys as N x Dh, values as Dh x N).
// q (T, H*Dh) at row stride ldq; causal >= 0: row t sees positions [0, causal + t] (self-
// attention after `causal` cached positions), -1: all N (cross-attention over the audio).
// out (T, H*Dh) at row stride ldo; weights (H, T, N) or null: the float32 probabilities (word
// timing). Scores and probabilities are rounded to bf16 for the products, the softmax is float32.
EXPORT int TK(attention_packed)(int T, int H, int Dh, const float* q, long ldq, const uint32_t* keys,
                                const uint32_t* values, int N, int causal, float* out, long ldo, float* weights,
                                int dot, int threads) {
  threads = threads < 1 ? 1 : threads;
#if defined(TK_BF16)
  if (dot) {
    attention_route<uint32_t>(T, H, Dh, q, ldq, keys, values, N, causal, out, ldo, weights, threads);
    return 0;
  }
#endif
  if (dot) return 1;
  attention_route<float>(T, H, Dh, q, ldq, keys, values, N, causal, out, ldo, weights, threads);
  return 0;
}

// ---- The encoder's GEMM in integers (issue 30): int16 x int16 pairs summed in int32 ----
//
// Where the CPU lacks vdpbf16ps, a float32 FMA does 8 multiply-adds a ymm instruction; vpmaddwd
// does 16 (int16 pairs into int32 lanes, no saturation but -32768^2 x 2, which never occurs
// here), with a vpaddd to accumulate. Quantisation as int8.cpp's: per input channel k a scale
// t[k] = max_n |w[n, k]|, folded into the rows (x t); per output column s[n] = max_k |w / t| /
// levels, values round-half-even(w / (t s)) in [-levels, levels]; the rows x t per row to int16
// in [-8191, 8191]. int32 sums are exact while a chunk of k keeps k x 8191 x levels < 2^31
// (levels 127: 2064 k, every encoder's K; more weight levels: shorter chunks); each chunk's
// int32 sums are added to float32 sums, in the same order on every path.
//
// Layouts: W (ceil(N/16), P, 16) int32 words, each an int16 pair (k even low, k odd high), as
// gemm_pack's bf16 pairs; column scales (16 ceil(N/16),), channel scales t (2P,), zero-padded.

namespace {

constexpr float ROW_LEVELS = 8191.0f;  // the rows' int16 range (14 bits)
// The tile: 4 rows x one panel of 16 columns (8 ymm accumulators). 6 x 16, as the FMA route's,
// needs 12 accumulators, 2 weight vectors, a broadcast and vpmaddwd's product before its add:
// more than 16 ymm, and GCC's spills made it slower than the FMA route (0.8-0.9x); 2 x 32
// measured 1.28-1.39x, 3 x 32 0.8-0.9x (spills), 4 x 16 1.32-1.46x (docs/speed.md).
constexpr int INT_ROWS = 4;

struct IntWeight {
  const uint32_t* w;
  const float* scale;    // s: (16 ceil(N/16),)
  const float* channel;  // t: (2P,)
  int chunk;             // k pairs whose int32 sums stay exact
};

// Two values, rounded half-even to int16, as one word of a pair (the first low, the second high).
inline uint32_t int16_pair(float lo, float hi) {
  const uint32_t low = (uint16_t)(int16_t)__builtin_nearbyintf(lo);
  return low | (uint32_t)(uint16_t)(int16_t)__builtin_nearbyintf(hi) << 16;
}

// M rows of a (at stride lda) x t -> int16 pairs (M, P), zero-padded; scale[m] = max |x t| / 8191.
void quantize_rows(int M, int K, const float* a, long lda, const float* t, uint32_t* out, float* scale) {
  const int P = (K + 1) / 2;
  for (int m = 0; m < M; m++) {
    const float* r = a + (long)m * lda;
    uint32_t* o = out + (long)m * P;
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
      const float v = __builtin_fabsf(r[k] * t[k]);
      amax = v > amax ? v : amax;
    }
    const float inv = amax > 0.0f ? ROW_LEVELS / amax : 0.0f;
    for (int p = 0; p < P; p++) {  // pairs written as words (k even low, k odd high; zero past K)
      const int k = 2 * p;
      o[p] = int16_pair(r[k] * t[k] * inv, k + 1 < K ? r[k + 1] * t[k + 1] * inv : 0.0f);
    }
    scale[m] = amax / ROW_LEVELS;
  }
}

// MR rows (A's int16 pairs at stride P) x one panel of 16 columns: float32 sums of the exact
// int32 sums of each chunk of k pairs.
#if defined(__AVX2__)
template <int MR>
void int_tile(int P, int chunk, const uint32_t* a, const uint32_t* w, float (&sums)[MR][LANES]) {
  for (int p0 = 0; p0 < P; p0 += chunk) {
    const int p1 = p0 + chunk < P ? p0 + chunk : P;
    __m256i acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
    for (int p = p0; p < p1; p++) {
      const __m256i w0 = _mm256_loadu_si256((const __m256i*)(w + (long)p * LANES));
      const __m256i w1 = _mm256_loadu_si256((const __m256i*)(w + (long)p * LANES + 8));
      for (int r = 0; r < MR; r++) {
        const __m256i x = _mm256_set1_epi32((int)a[(long)r * P + p]);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(x, w0));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(x, w1));
      }
    }
    for (int r = 0; r < MR; r++)
      for (int c = 0; c < 2; c++)
        _mm256_storeu_ps(sums[r] + 8 * c, _mm256_add_ps(_mm256_loadu_ps(sums[r] + 8 * c), _mm256_cvtepi32_ps(acc[r][c])));
  }
}
#else
// A word's int16 halves, as int32 (the pairs read as words, not through int16 pointers).
inline int32_t low16(uint32_t v) { return (int16_t)(uint16_t)(v & 0xFFFFu); }
inline int32_t high16(uint32_t v) { return (int16_t)(uint16_t)(v >> 16); }

template <int MR>
void int_tile(int P, int chunk, const uint32_t* a, const uint32_t* w, float (&sums)[MR][LANES]) {
  for (int p0 = 0; p0 < P; p0 += chunk) {
    const int p1 = p0 + chunk < P ? p0 + chunk : P;
    int32_t acc[MR][LANES] = {};
    for (int p = p0; p < p1; p++) {
      const uint32_t* wp = w + (long)p * LANES;
      for (int r = 0; r < MR; r++) {
        const uint32_t x = a[(long)r * P + p];
        for (int i = 0; i < LANES; i++) acc[r][i] += low16(x) * low16(wp[i]) + high16(x) * high16(wp[i]);
      }
    }
    for (int r = 0; r < MR; r++)
      for (int i = 0; i < LANES; i++) sums[r][i] += (float)acc[r][i];
  }
}
#endif

// The tile's sums x row scale x column scale, then the epilogue (bias, GELU, residual).
template <int MR>
void int_tile_at(int P, const uint32_t* a, const float* xs, const IntWeight& w, int j, int m0, const Epilogue& e) {
  float sums[MR][LANES] = {};
  int_tile<MR>(P, w.chunk, a, w.w + (long)j * P * LANES, sums);
  const int n0 = j * LANES;
  for (int r = 0; r < MR; r++) {
    float t[LANES];
    for (int i = 0; i < LANES; i++) t[i] = sums[r][i] * xs[r] * w.scale[n0 + i];
    vf v[S];
    memcpy(v, t, sizeof t);
    finish(e, m0 + r, n0, v);
  }
}

// Rows [m0, m1) (quantised: a, xs from row m0) x column blocks [j0, j1): panels outer (a
// panel stays in L1 for the block's tiles), tiles of INT_ROWS rows inner.
void int_row_block(int m0, int m1, int P, int j0, int j1, const uint32_t* a, const float* xs, const IntWeight& w,
                   const Epilogue& e) {
  for (int j = j0; j < j1; j++)
    for (int m = m0; m < m1; m += INT_ROWS) {
      const uint32_t* am = a + (long)(m - m0) * P;
      const float* x = xs + (m - m0);
      switch (m1 - m < INT_ROWS ? m1 - m : INT_ROWS) {
        case 4: int_tile_at<4>(P, am, x, w, j, m, e); break;
        case 3: int_tile_at<3>(P, am, x, w, j, m, e); break;
        case 2: int_tile_at<2>(P, am, x, w, j, m, e); break;
        default: int_tile_at<1>(P, am, x, w, j, m, e); break;
      }
    }
}

// k pairs whose int32 sums stay exact for weights of `levels`: 2 x 8191 x levels a pair.
inline int exact_pairs(int levels) {
  const long c = 2147483647L / (2L * (long)ROW_LEVELS * (levels < 1 ? 1 : levels));
  return c < 1 ? 1 : (int)c;
}

}  // namespace

// w (N, K) float32 -> int16 pairs (ceil(N/16), P, 16) of values in [-levels, levels] (levels
// <= 16383), column scales s (16 ceil(N/16),) and channel scales t (2P,). Once per weight.
EXPORT void TK(igemm_pack)(int N, int K, const float* w, int levels, uint32_t* out, float* scale, float* channel) {
  const int P = (K + 1) / 2, blocks = (N + LANES - 1) / LANES;
  for (int k = 0; k < 2 * P; k++) channel[k] = 0.0f;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      const float v = __builtin_fabsf(w[(long)n * K + k]);
      channel[k] = v > channel[k] ? v : channel[k];
    }
  std::vector<float> wt(2 * P);
  for (int n = 0; n < blocks * LANES; n++) {
    float amax = 0.0f;
    for (int k = 0; k < 2 * P; k++) {
      wt[k] = n < N && k < K && channel[k] > 0.0f ? w[(long)n * K + k] / channel[k] : 0.0f;
      amax = __builtin_fabsf(wt[k]) > amax ? __builtin_fabsf(wt[k]) : amax;
    }
    const float inv = amax > 0.0f ? (float)levels / amax : 0.0f;
    scale[n] = amax / (float)levels;
    for (int p = 0; p < P; p++) {
      out[((long)(n / LANES) * P + p) * LANES + n % LANES] = int16_pair(wt[2 * p] * inv, wt[2 * p + 1] * inv);
    }
  }
}

// c (M, N) = a (M, K; rows at stride lda, may overlap) x w^T (igemm_pack's, of `levels`) +
// bias, then GELU, then + res (stride ldr; may be c): gemm's contract on integer products.
EXPORT void TK(igemm)(int M, int N, int K, const float* a, long lda, const uint32_t* w, const float* scale,
                      const float* channel, int levels, const float* bias, const float* res, long ldr, int gelu,
                      float* c, long ldc, int threads) {
  const int P = (K + 1) / 2, nb = (N + LANES - 1) / LANES;
  threads = threads < 1 ? 1 : threads;
  const Epilogue e{bias, res, ldr, gelu, c, ldc, N};
  const IntWeight iw{w, scale, channel, exact_pairs(levels)};
  const Split s = split(M, nb, threads, INT_ROWS);
  const int items = s.items();
#pragma omp parallel for num_threads(threads) schedule(dynamic) if (threads > 1 && items > 1)
  for (int item = 0; item < items; item++) {
    int m0, m1, j0, j1;
    s.range(item, m0, m1, j0, j1);
    uint32_t* rows = scratch<uint32_t>(0, (long)ROW_BLOCK * P);
    float* xs = scratch<float>(2, ROW_BLOCK);
    quantize_rows(m1 - m0, K, a + m0 * lda, lda, channel, rows, xs);
    int_row_block(m0, m1, P, j0, j1, rows, xs, iw, e);
  }
}
