// AVX2 BF16-weight GEMM over packed column panels (gemm.h): a 256-bit load of one panel row
// widens to sixteen FP32 weights with a shift and a mask, and register tiles of R rows by C
// panels share every load. Weights never exist as FP32 in memory.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/avx2_util.h"
#include "kernels/gemm.h"
#include "kernels/tile_plan.h"

namespace mx::gemm_detail {
namespace {

constexpr int64_t kP = kBf16PanelCols;

using avx2::store_partial;

// R rows by C panels: 2 * R * C accumulators, each one FMA chain over k, so every output is
// the same sequence of operations whatever the tile shape or the rows beside it. At one row
// the C panels give the independent chains that hide FMA latency; at several rows each
// widened weight vector feeds R FMAs.
template <int R, int C>
void tile(const GemmBf16Args& a, int64_t row, int64_t panel, int64_t cols) {
  const int64_t kn = a.k;
  const float* x[R];
  const uint16_t* w[C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) x[r] = a.x + (row + r) * a.ldx;
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) w[c] = a.w + (panel + c) * kP * kn;
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  __m256 acc[R][C][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < kn; ++k) {
    if constexpr (C == 1) {
      // One panel: widen it once and broadcast each row just before its two FMAs, so that
      // six rows fit the registers (twelve accumulators, two weight halves, one broadcast).
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[0] + k * kP));
      const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
      const __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 xb = _mm256_broadcast_ss(x[r] + k);
        acc[r][0][0] = _mm256_fmadd_ps(xb, lo, acc[r][0][0]);
        acc[r][0][1] = _mm256_fmadd_ps(xb, hi, acc[r][0][1]);
      }
    } else {
      // Several panels: the row broadcasts stay while each panel is widened in turn.
      __m256 xb[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) xb[r] = _mm256_broadcast_ss(x[r] + k);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[c] + k * kP));
        const __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        const __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(v, hi_mask));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          acc[r][c][0] = _mm256_fmadd_ps(xb[r], lo, acc[r][c][0]);
          acc[r][c][1] = _mm256_fmadd_ps(xb[r], hi, acc[r][c][1]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float* y = a.y + (row + r) * a.ldy + panel * kP;
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const int64_t left = cols - c * kP;
      if (left >= kP) {
        _mm256_storeu_ps(y + c * kP, acc[r][c][0]);
        _mm256_storeu_ps(y + c * kP + 8, acc[r][c][1]);
      } else {
        store_partial(y + c * kP, acc[r][c][0], acc[r][c][1], left);
      }
    }
  }
}

using TileFn = void (*)(const GemmBf16Args&, int64_t, int64_t, int64_t);
constexpr int kMaxRows = 6, kMaxPanels = 6;
// Panels per tile for each row count: what 16 vector registers hold (2 * R * C accumulators,
// the two halves of one widened panel row and the row broadcasts).
constexpr int kPanels[kMaxRows + 1] = {0, 6, 2, 1, 1, 1, 1};

struct Bf16Tiles {
  template <int R, int C>
  static constexpr TileFn fn() {
    return &tile<R, C>;
  }
};
constexpr auto kTiles = tile_table<TileFn, kMaxRows, kMaxPanels, Bf16Tiles>();

// Rows in blocks that stay in L2 while a group of panels (in L1) passes over every row tile of
// the block; row tiles of up to six.
void bf16_avx2(const GemmBf16Args& a, int64_t n_begin, int64_t n_end) {
  run_tile_table(kTiles, a, n_begin, n_end, kP, kMaxRows, kPanels);
}

}  // namespace

const GemmKernels kAvx2Gemm = {IsaLevel::kAvx2, pack_bf16_panels, bf16_avx2};

}  // namespace mx::gemm_detail
