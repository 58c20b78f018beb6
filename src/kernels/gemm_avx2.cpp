// AVX2 BF16-weight GEMM: weights are widened to FP32 in registers (a 16-bit shift) and never
// in memory; up to four activation rows share each converted weight vector.
#include <immintrin.h>

#include "kernels/gemm.h"

namespace mx::gemm_detail {
namespace {

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float bf16_scalar(uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h) << 16)));
}

// R activation rows against one weight row: each weight vector is widened once and used R
// times, so the widening cost shrinks as the batch grows. Every row keeps two accumulators
// whatever R is, so a row's sum is the same in any tile: a batch gives bit-identical results
// to its sequences run alone. Six rows (12 accumulators) is what 16 registers hold.
template <int R>
inline void dot_rows(const float* const* x, const uint16_t* w, int64_t k, float* out) {
  constexpr int A = 2;
  __m256 acc[R][A];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < A; ++j) acc[r][j] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 * A <= k; i += 8 * A) {
    for (int j = 0; j < A; ++j) {
      const __m256 wv = load_bf16x8(w + i + 8 * j);
      for (int r = 0; r < R; ++r)
        acc[r][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i + 8 * j), wv, acc[r][j]);
    }
  }
  for (; i + 8 <= k; i += 8) {
    const __m256 wv = load_bf16x8(w + i);
    for (int r = 0; r < R; ++r)
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i), wv, acc[r][0]);
  }
  for (int r = 0; r < R; ++r) {
    __m256 t = acc[r][0];
    if constexpr (A == 2) t = _mm256_add_ps(t, acc[r][1]);
    float s = hsum(t);
    for (int64_t j = i; j < k; ++j) s += x[r][j] * bf16_scalar(w[j]);
    out[r] = s;
  }
}

template <int R>
void row_tile(const GemmBf16Args& a, int64_t row, int64_t n_begin, int64_t n_end) {
  const float* x[R];
  for (int r = 0; r < R; ++r) x[r] = a.x + (row + r) * a.ldx;
  for (int64_t n = n_begin; n < n_end; ++n) {
    float out[R];
    dot_rows<R>(x, a.w + n * a.ldw, a.k, out);
    for (int r = 0; r < R; ++r) a.y[(row + r) * a.ldy + n] = out[r];
  }
}

using TileFn = void (*)(const GemmBf16Args&, int64_t, int64_t, int64_t);
constexpr int kMaxTile = 6;
constexpr TileFn kTiles[kMaxTile + 1] = {nullptr,     row_tile<1>, row_tile<2>, row_tile<3>,
                                         row_tile<4>, row_tile<5>, row_tile<6>};

// Rows in tiles of up to six, sized evenly (13 rows: 5 + 4 + 4, not 6 + 6 + 1).
void bf16_avx2(const GemmBf16Args& a, int64_t n_begin, int64_t n_end) {
  const int64_t tiles = (a.m + kMaxTile - 1) / kMaxTile;
  for (int64_t t = 0, row = 0; t < tiles; ++t) {
    const int64_t rows = (a.m - row) / (tiles - t) + ((a.m - row) % (tiles - t) != 0);
    kTiles[rows](a, row, n_begin, n_end);
    row += rows;
  }
}

}  // namespace

const GemmKernels kAvx2Gemm = {IsaLevel::kAvx2, bf16_avx2};

}  // namespace mx::gemm_detail
