// The decoder step's linears with int8 weights (issue 30): y = x w^T + b + res for a few rows.
// Half the bytes of bf16 weights (the 1-row step is memory-bound, docs/speed.md), and
// integer multiply-adds that pack more products an instruction than float32 FMAs (4 rows).
//
// Quantisation (pack_int8, once per weight): per input channel k a scale t[k] = max_n |w[n, k]|
// (the channels of outsize weights: Whisper's embedding has some), folded into the rows at run
// time (x[k] t[k]); then per output column s[n] = max_k |w[n, k] / t[k]| / 127 and the values
// round-half-even(w / (t s)) in [-127, 127]. The rows, x t, per row to int16 in
// [-8191, 8191] (14 bits: K 1536 x 8191 x 127 < 2^31, so the int32 sums are exact). Measured on
// tiny.en's vocabulary projection (docs/speed.md): per-column int8 alone gave logits 15x
// bf16's RMS error, 8-bit rows (vpmaddubsw's u8 x s8) on top 17x; with t and 14-bit rows 2.4x.
//
// Packed layout, per block of 16 columns: ceil(K/4) rows of 16 columns x 4 consecutive k
// (64 bytes); then the 16 ceil(N/16) float column scales s, then the 4 ceil(K/4) float t.
// The products: int16 x int16 pairs into int32 (vpmaddwd on AVX2; vpdpwssd with AVX-512 VNNI;
// plain C elsewhere), the weights widened from int8 (vpmovsxbw) once for all rows. Each int32
// lane sums one column's k pair; the two pairs of a column's 4 k are added at the end. Exact
// integer sums on every route, so every path gives the same floats.

#include "vec.h"

#include <math.h>

namespace {

constexpr int KQ = 4;                  // k's per column in a packed row
constexpr int ROW_BYTES = LANES * KQ;  // one packed row of a block: 64 bytes
constexpr float X_LEVELS = 8191.0f;    // the rows' int16 range (14 bits)
constexpr int AHEAD = 32;  // packed rows prefetched ahead of each block's stream (as kernels.cpp's)

struct Int8Weight {  // views into one packed buffer
  const int8_t* w;
  const float* scale;    // (16 ceil(N/16),)
  const float* channel;  // t: (4 ceil(K/4),)
  int Q;                 // packed rows per block: ceil(K / 4)
};

Int8Weight view(int N, int K, const void* packed) {
  const int blocks = (N + LANES - 1) / LANES, Q = (K + KQ - 1) / KQ;
  const int8_t* w = (const int8_t*)packed;
  const float* scale = (const float*)(w + (long)blocks * Q * ROW_BYTES);
  return {w, scale, scale + (long)blocks * LANES, Q};
}

// Rows quantised: q (R, 4Q) int16 of x t in [-8191, 8191], zero-padded; scale[r] = max |x t| / 8191.
void quantize_rows(int R, int K, int Kp, const float* x, const float* t, int16_t* q, float* scale) {
  std::vector<float> xt(K);
  for (int r = 0; r < R; r++) {
    const float* xr = x + (long)r * K;
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
      xt[k] = xr[k] * t[k];
      amax = fabsf(xt[k]) > amax ? fabsf(xt[k]) : amax;
    }
    const float inv = amax > 0.0f ? X_LEVELS / amax : 0.0f;
    scale[r] = amax / X_LEVELS;
    int16_t* qr = q + (long)r * Kp;
    for (int k = 0; k < K; k++) qr[k] = (int16_t)nearbyintf(xt[k] * inv);
    for (int k = K; k < Kp; k++) qr[k] = 0;
  }
}

// The byte offset from a block's packed row q to the row AHEAD on in the same stream: within
// the block, or where the stream continues, the same block of the next group of B.
inline long ahead_bytes(int q, int Q, int B) {
  return q + AHEAD < Q ? (long)AHEAD * ROW_BYTES : ((long)B * Q - (Q - AHEAD)) * ROW_BYTES;
}

// R rows' int32 sums of NB blocks from block j on into acc[r][16 NB], plain C.
template <int R, int NB>
void sums_plain(const Int8Weight& w, int j, const int16_t* xq, int Kp, int32_t (&acc)[R][NB * LANES]) {
  for (int c = 0; c < NB; c++) {
    const int8_t* wb = w.w + (long)(j + c) * w.Q * ROW_BYTES;
    for (int q = 0; q < w.Q; q++) {
      const int8_t* row = wb + (long)q * ROW_BYTES;
      for (int r = 0; r < R; r++) {
        const int16_t* xr = xq + (long)r * Kp + q * KQ;
        for (int i = 0; i < LANES; i++) {
          int32_t s = 0;
          for (int t = 0; t < KQ; t++) s += (int32_t)xr[t] * row[i * KQ + t];
          acc[r][c * LANES + i] += s;
        }
      }
    }
  }
}

// Row r's 4 int16 of packed row q, as one 64-bit word (broadcast to every column's lanes).
inline int64_t four_k(const int16_t* xq, int r, int Kp, int q) {
  int64_t four;
  memcpy(&four, xq + (long)r * Kp + q * KQ, 8);
  return four;
}

// A column's two k-pair sums (adjacent int32 lanes of the accumulators, 2 lanes a column,
// columns in order) added into out (its columns).
inline void add_pairs(const int32_t* lanes, int columns, int32_t* out) {
  for (int i = 0; i < columns; i++) out[i] += lanes[2 * i] + lanes[2 * i + 1];
}

#if defined(__AVX2__)
// The same with vpmaddwd: per block, CH of its 4 chunks (4 columns x 4 k: 16 bytes, widened to
// 16 int16) from chunk c0, times the rows' 4 int16 broadcast; 2 int32 lanes a column.
template <int R, int NB, int CH>
void sums_madd(const Int8Weight& w, int j, int c0, const int16_t* xq, int Kp, int32_t (&out)[R][NB * LANES]) {
  __m256i acc[R][NB * CH];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < NB * CH; c++) acc[r][c] = _mm256_setzero_si256();
  const int8_t* wj = w.w + (long)j * w.Q * ROW_BYTES;
  for (int q = 0; q < w.Q; q++) {
    const long ahead = ahead_bytes(q, w.Q, NB);
    __m256i xb[R];
    for (int r = 0; r < R; r++) xb[r] = _mm256_set1_epi64x(four_k(xq, r, Kp, q));
    for (int c = 0; c < NB * CH; c++) {
      const int8_t* a = wj + ((long)(c / CH) * w.Q + q) * ROW_BYTES + (c0 + c % CH) * 16;
      if (c % CH == 0 && c0 == 0) __builtin_prefetch(a + ahead, 0, 3);
      const __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)a));
      for (int r = 0; r < R; r++) acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(wv, xb[r]));
    }
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < NB * CH; c++) {
      int32_t lanes[8];
      _mm256_storeu_si256((__m256i*)lanes, acc[r][c]);
      add_pairs(lanes, 4, out[r] + (c / CH) * LANES + (c0 + c % CH) * 4);
    }
}
#endif

#if defined(__AVX512F__)
// The same with vpdpwssd: per block, two chunks of 8 columns x 4 k (32 bytes, widened to 32
// int16) times the rows' 4 int16 broadcast.
template <int R, int NB>
__attribute__((target("avx512vnni,avx512bw"))) void sums_vnni(const Int8Weight& w, int j, const int16_t* xq, int Kp,
                                                               int32_t (&out)[R][NB * LANES]) {
  __m512i acc[R][2 * NB];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < 2 * NB; c++) acc[r][c] = _mm512_setzero_si512();
  const int8_t* wj = w.w + (long)j * w.Q * ROW_BYTES;
  for (int q = 0; q < w.Q; q++) {
    const long ahead = ahead_bytes(q, w.Q, NB);
    __m512i xb[R];
    for (int r = 0; r < R; r++) xb[r] = _mm512_set1_epi64(four_k(xq, r, Kp, q));
    for (int c = 0; c < 2 * NB; c++) {
      const int8_t* a = wj + ((long)(c / 2) * w.Q + q) * ROW_BYTES + (c % 2) * 32;
      if (c % 2 == 0) __builtin_prefetch(a + ahead, 0, 3);
      const __m512i wv = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)a));
      for (int r = 0; r < R; r++) acc[r][c] = _mm512_dpwssd_epi32(acc[r][c], wv, xb[r]);
    }
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < 2 * NB; c++) {
      int32_t lanes[16];
      _mm512_storeu_si512((void*)lanes, acc[r][c]);
      add_pairs(lanes, 8, out[r] + (c / 2) * LANES + (c % 2) * 8);
    }
}
#endif

// Rows in one call (all share each widened weight) and blocks a step (independent sums): the
// AVX2 route holds R x NB x CH of 16 ymm (4 rows: two passes over a block's halves, the second
// from L1), VNNI R x 2NB of 32 zmm.
#if defined(__AVX2__)
constexpr int ROWS_A_CALL = 4;
#else
constexpr int ROWS_A_CALL = 8;
#endif
template <int R>
constexpr int int8_blocks(bool vnni) {
  return vnni ? (R <= 2 ? 4 : 2) : (R == 1 ? 2 : 1);
}

struct Rows {  // the quantised rows of one call
  const int16_t* q;
  const float* scale;
  int Kp;
};

template <int R, int NB>
void int8_sums(const Int8Weight& w, int j, const Rows& x, bool vnni, int32_t (&acc)[R][NB * LANES]) {
#if defined(__AVX512F__)
  if (vnni) return sums_vnni<R, NB>(w, j, x.q, x.Kp, acc);
#endif
  (void)vnni;
#if defined(__AVX2__)
  if (R <= 2) return sums_madd<R, NB, 4>(w, j, 0, x.q, x.Kp, acc);
  sums_madd<R, NB, 2>(w, j, 0, x.q, x.Kp, acc);
  sums_madd<R, NB, 2>(w, j, 2, x.q, x.Kp, acc);
#else
  sums_plain<R, NB>(w, j, x.q, x.Kp, acc);
#endif
}

template <int R, int NB>
void int8_group(const Int8Weight& w, int j, const Rows& x, bool vnni, const float* b, const float* res, float* y,
                int N) {
  int32_t acc[R][NB * LANES] = {};
  int8_sums<R, NB>(w, j, x, vnni, acc);
  const int n0 = j * LANES, valid = N - n0 < NB * LANES ? N - n0 : NB * LANES;
  for (int r = 0; r < R; r++) {
    float* yr = y + (long)r * N + n0;
    const float* rr = res ? res + (long)r * N + n0 : nullptr;
    for (int i = 0; i < valid; i++)
      yr[i] = (float)acc[r][i] * (x.scale[r] * w.scale[n0 + i]) + (b ? b[n0 + i] : 0.0f) + (rr ? rr[i] : 0.0f);
  }
}

template <int R>
void int8_range(const Int8Weight& w, int j0, int j1, const Rows& x, bool vnni, const float* b, const float* res,
                float* y, int N) {
  int j = j0;
  if (vnni) {
    constexpr int NB = int8_blocks<R>(true);
    for (; j + NB <= j1; j += NB) int8_group<R, NB>(w, j, x, true, b, res, y, N);
  } else {
    constexpr int NB = int8_blocks<R>(false);
    for (; j + NB <= j1; j += NB) int8_group<R, NB>(w, j, x, false, b, res, y, N);
  }
  for (; j < j1; j++) int8_group<R, 1>(w, j, x, vnni, b, res, y, N);
}

void int8_rows(int R, const Int8Weight& w, int j0, int j1, const Rows& x, bool vnni, const float* b,
               const float* res, float* y, int N) {
  switch (R) {
    case 1: return int8_range<1>(w, j0, j1, x, vnni, b, res, y, N);
    case 2: return int8_range<2>(w, j0, j1, x, vnni, b, res, y, N);
    case 3: return int8_range<3>(w, j0, j1, x, vnni, b, res, y, N);
#if defined(__AVX2__)
    default: return int8_range<4>(w, j0, j1, x, vnni, b, res, y, N);  // ROWS_A_CALL
#else
    case 4: return int8_range<4>(w, j0, j1, x, vnni, b, res, y, N);
    case 5: return int8_range<5>(w, j0, j1, x, vnni, b, res, y, N);
    case 6: return int8_range<6>(w, j0, j1, x, vnni, b, res, y, N);
    case 7: return int8_range<7>(w, j0, j1, x, vnni, b, res, y, N);
    default: return int8_range<8>(w, j0, j1, x, vnni, b, res, y, N);
#endif
  }
}

}  // namespace

// kernels.cpp's linear() for wtype 3 (int8, vpmaddwd or plain C) and 4 (vpdpwssd where this
// path has it): R rows (any number), threads over parts of column blocks (pool.cpp).
void TK(linear_int8)(int R, int K, int N, const float* x, const void* packed, bool vnni, const float* b,
                     const float* res, float* y, int threads) {
#if !defined(__AVX512F__)
  vnni = false;
#endif
  const Int8Weight w = view(N, K, packed);
  const int Kp = w.Q * KQ, blocks = (N + LANES - 1) / LANES;
  std::vector<int16_t> q((long)R * Kp);
  std::vector<float> scale(R);
  quantize_rows(R, K, Kp, x, w.channel, q.data(), scale.data());
  const int per = threads > 1 ? part_blocks(blocks, threads) : blocks;
  for (int r0 = 0; r0 < R; r0 += ROWS_A_CALL) {
    const int rows = R - r0 < ROWS_A_CALL ? R - r0 : ROWS_A_CALL;
    const Rows xr{q.data() + (long)r0 * Kp, scale.data() + r0, Kp};
    const float* rr = res ? res + (long)r0 * N : nullptr;
    float* yr = y + (long)r0 * N;
    run_parts((blocks + per - 1) / per, threads, [&](int part) {
      const int j0 = part * per, j1 = j0 + per < blocks ? j0 + per : blocks;
      int8_rows(rows, w, j0, j1, xr, vnni, b, rr, yr, N);
    });
  }
}

// The bytes pack_int8 writes for a weight (N, K).
EXPORT long TK(int8_bytes)(int N, int K) {
  const long blocks = (N + LANES - 1) / LANES, Q = (K + KQ - 1) / KQ;
  return blocks * (Q * ROW_BYTES + LANES * 4) + Q * KQ * 4;
}

// w (N, K) float32 -> the packed int8 layout (the file's head): t[k] = max_n |w[n, k]|, then
// per column s[n] = max_k |w[n, k] / t[k]| / 127, values round-half-even(w / t x 127 / max).
// Done once per weight.
EXPORT void TK(pack_int8)(int N, int K, const float* w, void* out) {
  const int blocks = (N + LANES - 1) / LANES, Q = (K + KQ - 1) / KQ;
  int8_t* packed = (int8_t*)out;
  float* scale = (float*)(packed + (long)blocks * Q * ROW_BYTES);
  float* t = scale + (long)blocks * LANES;
  for (int k = 0; k < Q * KQ; k++) t[k] = 0.0f;
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) t[k] = fabsf(w[(long)n * K + k]) > t[k] ? fabsf(w[(long)n * K + k]) : t[k];
  std::vector<float> wt(K);
  for (int n = 0; n < blocks * LANES; n++) {
    float amax = 0.0f;
    for (int k = 0; k < K; k++) {
      wt[k] = n < N && t[k] > 0.0f ? w[(long)n * K + k] / t[k] : 0.0f;
      amax = fabsf(wt[k]) > amax ? fabsf(wt[k]) : amax;
    }
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    scale[n] = amax / 127.0f;
    int8_t* col = packed + (long)(n / LANES) * Q * ROW_BYTES + (n % LANES) * KQ;
    for (int k = 0; k < Q * KQ; k++)
      col[(long)(k / KQ) * ROW_BYTES + k % KQ] = k < K ? (int8_t)nearbyintf(wt[k] * inv) : 0;
  }
}

// 1 where this path's library has the vpdpwssd route (the CPU must have avx512_vnni to take it).
EXPORT int TK(int8_has_vnni)() {
#if defined(__AVX512F__)
  return 1;
#else
  return 0;
#endif
}
