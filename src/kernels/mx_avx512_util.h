// Pieces that the AVX-512 MX GEMM units share: block scale vectors and the tiles' stores.
// Included only by translation units compiled with the AVX-512 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/mx_gemm.h"

namespace mx::mx_gemm_detail {
// Internal linkage: each including unit keeps its own copies (see tile_plan.h).
namespace {

// Block b's scale vector of a panel: the stored exponent bytes as FP32 powers of two, times
// the chunk scales when dual-level (the scalar kernels' sv).
__attribute__((always_inline)) inline __m512 scale_vec(const MxPanelView& w, int64_t panel,
                                                       int64_t b, int64_t nb, int64_t nc) {
  const __m128i bytes =
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales + (panel * nb + b) * kMxPanelCols));
  __m512 s = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu8_epi32(bytes), 23));
  if (w.chunk_scales != nullptr) {
    s = _mm512_mul_ps(s, _mm512_loadu_ps(w.chunk_scales + (panel * nc + b / 16) * kMxPanelCols));
  }
  return s;
}

__attribute__((always_inline)) inline void store_cols(float* y, __m512 v, int64_t left) {
  if (left >= kMxPanelCols) {
    _mm512_storeu_ps(y, v);
  } else {
    _mm512_mask_storeu_ps(y, static_cast<__mmask16>((1u << left) - 1), v);
  }
}

// A tile's totals times the post factor, rows from `row`, panels from `panel` (cols valid
// columns from its first).
template <int R, int C>
__attribute__((always_inline)) inline void store_tile(const __m512 (&total)[R][C],
                                                      const MxGemmArgs& a, int64_t row,
                                                      int64_t panel, int64_t cols) {
  const __m512 post = _mm512_set1_ps(a.w->post);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* y = a.y + (row + r) * a.ldy + panel * kMxPanelCols - a.y_col0;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      store_cols(y + c * kMxPanelCols, _mm512_mul_ps(total[r][c], post), cols - c * kMxPanelCols);
  }
}

// The wide passes' row tiles: rows [0, m) in tiles of at most max_rows, sized evenly (13 rows
// at most 12: 7 + 6), fn(first row, rows) for each.
template <typename Fn>
void even_row_tiles(int64_t m, int64_t max_rows, Fn&& fn) {
  const int64_t tiles = (m + max_rows - 1) / max_rows;
  for (int64_t t = 0, r = 0; t < tiles; ++t) {
    const int64_t left = m - r;
    const int64_t rows = left / (tiles - t) + (left % (tiles - t) != 0);
    fn(r, rows);
    r += rows;
  }
}

// A wide pass's totals of rows [row0, row0 + m) and panels [p0, p0 + np) (panel i's rows from
// total + i * tstride) times the post factor into y; output columns end at n_end.
inline void store_wide_totals(const MxGemmArgs& a, const float* total, int64_t tstride,
                              int64_t row0, int64_t m, int64_t p0, int64_t np, int64_t n_end) {
  const __m512 post = _mm512_set1_ps(a.w->post);
  for (int64_t i = 0; i < np; ++i) {
    const int64_t cols = n_end - (p0 + i) * kMxPanelCols;
    for (int64_t r = 0; r < m; ++r) {
      float* y = a.y + (row0 + r) * a.ldy + (p0 + i) * kMxPanelCols - a.y_col0;
      store_cols(y, _mm512_mul_ps(_mm512_load_ps(total + i * tstride + r * kMxPanelCols), post),
                 cols);
    }
  }
}

}  // namespace
}  // namespace mx::mx_gemm_detail
