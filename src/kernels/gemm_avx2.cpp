// AVX2 BF16-weight GEMM: weights are widened to FP32 in registers (a 16-bit shift) and never
// in memory; register tiles of up to six rows by six columns share every load.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

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

// An R x C tile of outputs: R activation rows against C weight rows, one 8-lane accumulator
// per output. Each widened weight vector feeds R FMAs and each activation load C, and the
// R * C independent chains hide the FMA latency even at one row (decode). Every output is
// the same sequence of operations whatever the tile shape, so a row's result does not depend
// on the batch it came in.
template <int R, int C>
void tile(const GemmBf16Args& a, int64_t row, int64_t col) {
  const float* x[R];
  const uint16_t* w[C];
  for (int r = 0; r < R; ++r) x[r] = a.x + (row + r) * a.ldx;
  for (int c = 0; c < C; ++c) w[c] = a.w + (col + c) * a.ldw;
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= a.k; i += 8) {
    __m256 wv[C];
    for (int c = 0; c < C; ++c) wv[c] = load_bf16x8(w[c] + i);
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_loadu_ps(x[r] + i);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float s = hsum(acc[r][c]);
      for (int64_t j = i; j < a.k; ++j) s += x[r][j] * bf16_scalar(w[c][j]);
      a.y[(row + r) * a.ldy + col + c] = s;
    }
  }
}

using TileFn = void (*)(const GemmBf16Args&, int64_t, int64_t);
constexpr int kMaxRows = 6, kMaxCols = 6;
// Columns per tile for each row count: what 16 vector registers hold (R * C accumulators,
// C weight vectors and one activation vector).
constexpr int kCols[kMaxRows + 1] = {0, 6, 4, 3, 3, 2, 2};

template <int R, int... Cs>
constexpr std::array<TileFn, kMaxCols + 1> row_of(std::integer_sequence<int, Cs...>) {
  return {nullptr, &tile<R, Cs + 1>...};
}
template <int... Rs>
constexpr std::array<std::array<TileFn, kMaxCols + 1>, kMaxRows + 1> table_of(
    std::integer_sequence<int, Rs...>) {
  return {std::array<TileFn, kMaxCols + 1>{},
          row_of<Rs + 1>(std::make_integer_sequence<int, kMaxCols>())...};
}
constexpr auto kTiles = table_of(std::make_integer_sequence<int, kMaxRows>());

// Rows in tiles of up to six, sized evenly (13 rows: 5 + 4 + 4, not 6 + 6 + 1); columns in
// tiles as wide as the row count allows, the last one narrower.
void bf16_avx2(const GemmBf16Args& a, int64_t n_begin, int64_t n_end) {
  const int64_t tiles = (a.m + kMaxRows - 1) / kMaxRows;
  for (int64_t t = 0, row = 0; t < tiles; ++t) {
    const int64_t rows = (a.m - row) / (tiles - t) + ((a.m - row) % (tiles - t) != 0);
    const int64_t cols = kCols[rows];
    for (int64_t n = n_begin; n < n_end; n += cols) {
      kTiles[static_cast<size_t>(rows)][static_cast<size_t>(std::min(cols, n_end - n))](a, row, n);
    }
    row += rows;
  }
}

}  // namespace

const GemmKernels kAvx2Gemm = {IsaLevel::kAvx2, bf16_avx2};

}  // namespace mx::gemm_detail
