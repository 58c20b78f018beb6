// AVX-512 BF16-weight GEMM over this ISA's own panels (pack_bf16_panels_avx512): one 512-bit
// load of a panel holds two k of its sixteen columns and widens to two FP32 vectors with a
// shift and a mask. Register tiles of R rows by C panels share every load; each output keeps
// one FMA chain over k in order, so a row's result does not depend on the rows beside it.
//
// Compiled with AVX-512 flags: nothing here instantiates an inline function of a shared header
// that another translation unit could link in its place (see formats/act_quant.h).
#include <immintrin.h>

#include <array>
#include <utility>

#include "kernels/gemm.h"
#include "kernels/tile_plan.h"

namespace mx::gemm_detail {
namespace {

constexpr int64_t kP = kBf16PanelCols;

template <int R, int C>
void tile(const GemmBf16Args& a, int64_t row, int64_t panel, int64_t cols) {
  const int64_t kn = a.k, pairs = kn / 2;
  const float* x[R];
  const uint16_t* w[C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) x[r] = a.x + (row + r) * a.ldx;
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) w[c] = a.w + (panel + c) * kP * kn;
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512 acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < pairs; ++j) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512i v = _mm512_loadu_si512(w[c] + 2 * kP * j);
      const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(x[r][2 * j]), even, acc[r][c]);
        acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(x[r][2 * j + 1]), odd, acc[r][c]);
      }
    }
  }
  if (kn % 2 != 0) {
    // The last k of an odd count: sixteen weights in column order.
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[c] + 2 * kP * pairs));
      const __m512 last = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(x[r][kn - 1]), last, acc[r][c]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* y = a.y + (row + r) * a.ldy + panel * kP;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const int64_t left = cols - c * kP;
      if (left >= kP) {
        _mm512_storeu_ps(y + c * kP, acc[r][c]);
      } else {
        _mm512_mask_storeu_ps(y + c * kP, static_cast<__mmask16>((1u << left) - 1), acc[r][c]);
      }
    }
  }
}

using TileFn = void (*)(const GemmBf16Args&, int64_t, int64_t, int64_t);
constexpr int kMaxRows = 6, kMaxPanels = 8;
// Panels per tile for each row count: eight or more FMA chains where the rows allow (two
// pipes of four-cycle FMAs), within the 32 vector registers.
constexpr int kPanels[kMaxRows + 1] = {0, 8, 4, 2, 2, 2, 2};

// Only the shapes for_each_tile can ask for (at most the row count's panels) are compiled.
struct Bf16Tiles {
  template <int R, int C>
  static constexpr TileFn fn() {
    if constexpr (C > kPanels[R]) {
      return nullptr;
    } else {
      return &tile<R, C>;
    }
  }
};
constexpr auto kTiles = tile_table<TileFn, kMaxRows, kMaxPanels, Bf16Tiles>();

void bf16_avx512(const GemmBf16Args& a, int64_t n_begin, int64_t n_end) {
  run_tile_table(kTiles, a, n_begin, n_end, kP, kMaxRows, kPanels);
}

}  // namespace

const GemmKernels kAvx512Gemm = {IsaLevel::kAvx512, pack_bf16_panels_avx512, bf16_avx512};

}  // namespace mx::gemm_detail
