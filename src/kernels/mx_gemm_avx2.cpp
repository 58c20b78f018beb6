// AVX2 MX GEMM over packed column panels (mx_gemm.h). E4M3 weights: one 256-bit load of a
// panel row widens to four vectors of eight FP32 weights with shifts and a mask, each feeding
// R rows of FMAs. E2M1 weights: exact integer dots per block, byte products against E2M1
// activations (W4A4), and against 14-bit E4M3 ones int16 products for several rows and byte
// products on the activations split in two bytes for one (W4A8). Block scales apply once per
// block, and weights never exist widened in memory, except a group of blocks of a panel at a
// time in L1 for prefill (E4M3 widened, W4A8 decoded).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <utility>

#include "kernels/avx2_util.h"
#include "kernels/mx_gemm.h"
#include "kernels/mx_prefetch.h"
#include "kernels/tile_plan.h"

namespace mx::mx_gemm_detail {
namespace {

constexpr int64_t kP = kMxPanelCols;

// The four sub-vectors of an E4M3 panel row: w[t] holds byte t of every dword lane as FP32
// bits with the exponent bias left to the block scale. A 16-bit arithmetic right shift puts
// bytes 1 and 3 at the top of their halves with the sign spread above them, and after a 16-bit
// left shift by 8, bytes 0 and 2; byte 3 or 2 is then one mask away from FP32 and byte 1 or 0
// one 32-bit left shift and a mask. Nine operations for 32 weights, against eleven for
// widening each byte on its own.
__attribute__((always_inline)) inline void widen4(__m256i v, __m256 (&w)[4]) {
  const __m256i mask = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
  const __m256i odd = _mm256_srai_epi16(v, 4);
  const __m256i even = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 4);
  w[0] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(even, 16), mask));
  w[1] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(odd, 16), mask));
  w[2] = _mm256_castsi256_ps(_mm256_and_si256(even, mask));
  w[3] = _mm256_castsi256_ps(_mm256_and_si256(odd, mask));
}

using avx2::store_partial;

// The FP32 totals of an R x C tile: zeroed at its start, and at its end times 2^g into y.
template <int R, int C>
void zero_totals(float (&total)[R][C][kP]) {
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      _mm256_store_ps(total[r][c], _mm256_setzero_ps());
      _mm256_store_ps(total[r][c] + 8, _mm256_setzero_ps());
    }
  }
}

template <int R, int C>
void store_totals(const float (&total)[R][C][kP], const MxGemmArgs& a, int64_t row, int64_t panel,
                  int64_t cols) {
  const __m256 post = _mm256_set1_ps(a.w->post);
  for (int r = 0; r < R; ++r) {
    float* y = a.y + (row + r) * a.ldy + panel * kP - a.y_col0;
    for (int c = 0; c < C; ++c) {
      const __m256 lo = _mm256_mul_ps(_mm256_load_ps(total[r][c]), post);
      const __m256 hi = _mm256_mul_ps(_mm256_load_ps(total[r][c] + 8), post);
      const int64_t left = cols - c * kP;
      if (left >= kP) {
        _mm256_storeu_ps(y + c * kP, lo);
        _mm256_storeu_ps(y + c * kP + 8, hi);
      } else {
        store_partial(y + c * kP, lo, hi, left);
      }
    }
  }
}

// Half h of column panel p's scale vector at block b: E8M0-derived exponent bytes shifted into
// place, times the chunk scale when dual-level.
__attribute__((always_inline)) inline __m256 scale_vector(const MxPanelView& w, int64_t p,
                                                          int64_t b, int h, int64_t nb) {
  const __m128i bytes =
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.scales + (p * nb + b) * kP + 8 * h));
  const __m256 v = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(bytes), 23));
  if (w.chunk_scales == nullptr) return v;
  const int64_t nc = (w.k + 511) / 512;
  return _mm256_mul_ps(v, _mm256_loadu_ps(w.chunk_scales + (p * nc + b / 16) * kP + 8 * h));
}

// The scale vectors of C panels for blocks [b0, b1) (at most kGroupBlocks) into s, 2 * C per
// block. The wide passes compute a group's once, for all the row tiles that read it.
constexpr int64_t kGroupBlocks = 16;

// The scale bytes of the group after the one ending at b1 (this tile's next group, or the
// next tile's first), asked for a group ahead. A group's scales are a few cache lines per
// panel, read in one burst that the hardware prefetcher, following the codes, does not
// foresee: at one row the loads that missed were a fifth of the W4A4 kernel's samples.
template <int C>
inline void prefetch_scales(const MxPanelView& w, int64_t panel, int64_t b1, int64_t nb) {
  const int64_t panels = mx_panels(w.n);
  if (b1 >= nb) {
    panel += C;
    b1 = 0;
  }
  const int64_t bytes = std::min(kGroupBlocks, nb - b1) * kP, nc = (w.k + 511) / 512;
  for (int c = 0; c < C && panel + c < panels; ++c) {
    const char* sc = reinterpret_cast<const char*>(w.scales + ((panel + c) * nb + b1) * kP);
    for (int64_t off = 0; off < bytes; off += 64) prefetch_line(sc + off);
    prefetch_line(sc + bytes - 1);
    if (w.chunk_scales != nullptr) {
      prefetch_line(w.chunk_scales + ((panel + c) * nc + b1 / 16) * kP);
    }
  }
}

template <int C>
__attribute__((noinline)) void block_scales(const MxPanelView& w, int64_t panel, int64_t b0,
                                            int64_t b1, int64_t nb, __m256* s) {
  prefetch_scales<C>(w, panel, b1, nb);
  for (int64_t b = b0; b < b1; ++b, s += 2 * C) {
    for (int c = 0; c < C; ++c) {
      for (int h = 0; h < 2; ++h) s[2 * c + h] = scale_vector(w, panel + c, b, h, nb);
    }
  }
}

// At block b of C panels: the panels' code rows, and the next group's scales asked for at the
// start of each group. The direct tiles decode each scale vector where they use it: computed
// ahead out of line into memory, the call's register spills, stores and reloads cost one-row
// W4A8 an eighth of its speed in mx_bench (16.6 -> 18.5-19.2 GB/s inline; W4A4 22.7-23.1 ->
// 25.7-25.9).
template <int C>
inline void begin_block(const MxPanelView& w, int64_t panel, int64_t b, int64_t nb,
                        int64_t block_bytes, const uint8_t** wrow) {
  if (b % kGroupBlocks == 0) prefetch_scales<C>(w, panel, std::min(nb, b + kGroupBlocks), nb);
  for (int c = 0; c < C; ++c) wrow[c] = w.codes + ((panel + c) * nb + b) * block_bytes;
}

// R rows by C panels: per block, 2 * R * C accumulators in registers, each one FMA chain over
// the block's k; then each is multiplied by its scale vector into a total kept in memory
// (touched once per block, so the registers stay with the chains).
template <int R, int C>
void tile(const MxGemmArgs& a, int64_t row, int64_t panel, int64_t cols) {
  constexpr int Q = 2;
  constexpr int64_t kRowsPerBlock = 32 / Q, kBlockBytes = 512;
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32;
  alignas(32) float total[R][C][kP];
  zero_totals(total);
  for (int64_t b = 0; b < nb; ++b) {
    // The codes 4 KB ahead into L2 (2 KB: one-row W8A8 decode 34 -> 42-44 tok/s; 4 KB on a
    // Zen 4 whose memory outran this kernel's 2 KB: Qwen3.5-shaped lm_head 25.3-25.8 ->
    // 21.4-23.7 ms; into L2 rather than L1 there, 18.5-19.4 -> 15.4-15.7).
    prefetch_blocks_ahead(w, panel, C, nb, b, 8, kBlockBytes, true);
    const uint8_t* wrow[C];
    begin_block<C>(w, panel, b, nb, kBlockBytes, wrow);
    const float* x[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) x[r] = a.x + (row + r) * a.ldx + b * 32;
    __m256 acc[R][C][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < kRowsPerBlock; ++j) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        // Each row broadcast just before its FMAs, so that the accumulators, the widened row
        // and the mask fit the registers.
        __m256 wv[4];
        widen4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wrow[c])), wv);
#pragma GCC unroll 2
        for (int q = 0; q < Q; ++q) {
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r) {
            const __m256 xb = _mm256_broadcast_ss(x[r] + q);
            acc[r][c][0] = _mm256_fmadd_ps(xb, wv[2 * q], acc[r][c][0]);
            acc[r][c][1] = _mm256_fmadd_ps(xb, wv[2 * q + 1], acc[r][c][1]);
          }
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) wrow[c] += 32;
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) x[r] += Q;
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256 s = scale_vector(w, panel + c, b, h, nb);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          float* t = total[r][c] + 8 * h;
          _mm256_store_ps(t, _mm256_fmadd_ps(acc[r][c][h], s, _mm256_load_ps(t)));
        }
      }
    }
    // The totals and scale vectors stay in memory rather than in registers the chains need.
    asm volatile("" : : "r"(&total[0][0][0]) : "memory");
  }
  store_totals(total, a, row, panel, cols);
}

using TileFn = void (*)(const MxGemmArgs&, int64_t, int64_t, int64_t);
constexpr int kMaxRows = 4, kMaxPanels = 4;
// Panels per tile for each row count: 2 * R * C accumulators, a widened half, the row
// broadcasts, the panel row and the mask within sixteen registers (five or six rows of one
// panel would spill accumulators).
constexpr int kPanels[kMaxRows + 1] = {0, 4, 2, 1, 1};
// W4A8's one-row tiles keep four accumulators per panel (W4a8Bytes), so take two panels.
constexpr int kW4a8Panels[kMaxRows + 1] = {0, 2, 2, 1, 1};

// One row's block epilogue with the scales built as exponents (tile_int): per half panel,
// the stored bytes plus exp shifted into an FP32 exponent, times the block's exact dot.
template <typename K, int C>
__attribute__((always_inline)) inline void exp_epilogue(const MxPanelView& w, int64_t panel,
                                                        int64_t b, int64_t nb, int32_t exp,
                                                        const MxGemmArgs& a, int64_t xi,
                                                        const __m256i (&acc)[C][K::kAcc],
                                                        float (&total)[C][kP]) {
  const __m256i e = _mm256_set1_epi32(exp);
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m128i bytes = _mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(w.scales + ((panel + c) * nb + b) * kP + 8 * h));
      const __m256 scale = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtepu8_epi32(bytes), e), 23));
      float* t = total[c] + 8 * h;
      _mm256_store_ps(t, _mm256_fmadd_ps(_mm256_cvtepi32_ps(K::dot(acc[c], h, a, xi)), scale,
                                         _mm256_load_ps(t)));
    }
  }
}

// The integer kernels (E2M1 weights): R rows by C panels, per block K::kAcc * R * C integer
// accumulators in registers that the policy K fills from the panel rows and the rows'
// activations; then each block's exact integer dot is scaled by (stored scale * 2^(64 - f))
// * the row's activation scale into the FP32 totals, kept in memory (touched once per block).
// K provides: kAcc, the accumulators per row and panel; x(a, row, b), a row's activation
// bytes for block b; accumulate(wrow, x, acc), the block's sums; dot(acc, h, a, xi), the
// exact int32 dots of half h of a panel for one row, 2^kShift times the block's exact sum.
// With exp (one row; one_row_exp below) each block's scale is built as an exponent instead:
// exp[b] plus a stored scale byte is the FP32 exponent of (stored scale * 2^(64 - f)) * the
// row's activation scale * 2^kShift, and the dot is taken without the shift.
template <typename K, int R, int C>
void tile_int(const MxGemmArgs& a, int64_t row, int64_t panel, int64_t cols,
              const int32_t* exp = nullptr) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32;
  const __m256 unit = _mm256_set1_ps(0x1p-62f);  // mx_panel_scale_unit(kE2M1)
  alignas(32) float total[R][C][kP];
  zero_totals(total);
  for (int64_t b = 0; b < nb; ++b) {
    // The codes 4 KB ahead into L2 (2 KB: one-row W4A8 decode 58-62 -> 73-76 tok/s; 4 KB on a
    // Zen 4: Qwen3.5-shaped W4A8 decode 45.2-56.0 -> 56.2-60.7 tok/s, W4A4 level; into L2
    // rather than L1 there, W4A8 66.1-66.2 -> 74.4-76.0, W4A4 62.3-62.6 -> 73.9-76.7).
    prefetch_blocks_ahead(w, panel, C, nb, b, 16, 256, true);
    const uint8_t* wrow[C];
    begin_block<C>(w, panel, b, nb, 256, wrow);
    const int8_t* x[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) x[r] = K::x(a, row + r, b);
    __m256i acc[R][C][K::kAcc];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
        for (int q = 0; q < K::kAcc; ++q) acc[r][c][q] = _mm256_setzero_si256();
      }
    }
    K::template accumulate<R, C>(wrow, x, acc);
    if constexpr (R == 1) {
      if (exp != nullptr) {
        exp_epilogue<K, C>(w, panel, b, nb, exp[b], a, row * nb + b, acc[0], total[0]);
        continue;
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256 sv = _mm256_mul_ps(scale_vector(w, panel + c, b, h, nb), unit);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const int64_t xi = (row + r) * nb + b;
          __m256i dot = K::dot(acc[r][c], h, a, xi);
          if constexpr (K::kShift != 0) dot = _mm256_slli_epi32(dot, K::kShift);
          const __m256 scale = _mm256_mul_ps(sv, _mm256_set1_ps(a.xscale[xi]));
          float* t = total[r][c] + 8 * h;
          _mm256_store_ps(t, _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, _mm256_load_ps(t)));
        }
      }
    }
  }
  store_totals(total, a, row, panel, cols);
}

// A panel row of E2M1 codes as two vectors of offset bytes 2 * value + 12 (pshufb): lo holds
// the low nibbles (columns l of each dword lane), hi the high ones (columns l + 8).
__attribute__((always_inline)) inline void offset_codes(const uint8_t* p, __m256i& lo,
                                                        __m256i& hi) {
  const __m256i lut = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                       12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, nibble));
  hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
}

__attribute__((always_inline)) inline __m256i broadcast4(const int8_t* p) {
  int32_t four;
  __builtin_memcpy(&four, p, 4);
  return _mm256_set1_epi32(four);
}

// Called once per step of a block: the integer sums stay chains of adds. Without it, GCC
// reassociates each into a tree over the block's products, which it computes first and
// spills (about 85 stores and reloads per block of a one-row tile).
template <int R, int C, int A>
__attribute__((always_inline)) inline void keep_chains(__m256i (&acc)[R][C][A]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
      for (int q = 0; q < A; ++q) asm("" : "+x"(acc[r][c][q]));
    }
  }
}

// W4A4: a panel row's nibbles index a 16-byte table of 2 * value + 12 (pshufb), and a
// byte multiply-add against four activation bytes broadcast per dword lane sums four k per
// column into 16-bit lanes, exactly (a block's |sum| stays below 2^13). Per block, the 16-bit
// sums are widened and the offset's share taken off.
struct W4a4 {
  static constexpr int kAcc = 2, kShift = 0;
  static const int8_t* x(const MxGemmArgs& a, int64_t row, int64_t b) {
    return a.xq + row * a.ldx + b * 32;
  }
  template <int R, int C>
  __attribute__((always_inline)) static void accumulate(const uint8_t* const (&wrow)[C],
                                                        const int8_t* const (&x)[R],
                                                        __m256i (&acc)[R][C][kAcc]) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        __m256i lo, hi;
        offset_codes(wrow[c] + 32 * j, lo, hi);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m256i xb = broadcast4(x[r] + 4 * j);
          acc[r][c][0] = _mm256_add_epi16(acc[r][c][0], _mm256_maddubs_epi16(lo, xb));
          acc[r][c][1] = _mm256_add_epi16(acc[r][c][1], _mm256_maddubs_epi16(hi, xb));
        }
      }
      keep_chains(acc);
    }
  }
  __attribute__((always_inline)) static __m256i dot(const __m256i (&acc)[kAcc], int h,
                                                    const MxGemmArgs& a, int64_t xi) {
    return _mm256_sub_epi32(_mm256_madd_epi16(acc[h], _mm256_set1_epi16(1)),
                            _mm256_set1_epi32(kMxFp4WeightOffset * a.xsum[xi]));
  }
};

// W4a8Words's four int16 lane vectors of one panel row (eleven operations; see W4a8Words).
__attribute__((always_inline)) inline void w4a8_words(const uint8_t* p, __m256i (&w)[4]) {
  const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0,
                                       1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m256i nibble = _mm256_set1_epi16(0x0F00);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  w[0] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_slli_epi16(v, 8), nibble));
  w[1] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_slli_epi16(v, 4), nibble));
  w[2] = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, nibble));
  w[3] = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble));
}

// One row's step j of W4a8Words: the two dwords of activations broadcast against a panel
// row's four lane vectors.
__attribute__((always_inline)) inline void w4a8_words_step(const __m256i (&w)[4], const int8_t* x,
                                                           __m256i (&acc)[2]) {
  int32_t pair[2];
  __builtin_memcpy(pair, x, 8);
  const __m256i p0 = _mm256_set1_epi32(pair[0]), p1 = _mm256_set1_epi32(pair[1]);
  acc[0] = _mm256_add_epi32(
      acc[0], _mm256_add_epi32(_mm256_madd_epi16(w[0], p0), _mm256_madd_epi16(w[2], p1)));
  acc[1] = _mm256_add_epi32(
      acc[1], _mm256_add_epi32(_mm256_madd_epi16(w[1], p0), _mm256_madd_epi16(w[3], p1)));
}

// W4A8, several rows: each int16 lane of a panel row holds four nibbles; a shift and a mask
// bring one of them to the lane's high byte with a zero low byte, and a pshufb table of
// 2 * value turns the lane into 512 * value. vpmaddwd against a dword of two 14-bit
// activations broadcast then sums two k of one column into its int32 lane: nibbles 0 and 1 of
// a lane pair k = 4j with 4j + 2 (columns l and l + 8), nibbles 2 and 3 pair 4j + 1 with
// 4j + 3, the order in which mx_prepare_fp8_activations_i16 stores the activations. A block's
// sum is exact in int32 (mx_gemm.h). The decode (eleven operations per 64 weights) is shared
// by the tile's rows.
struct W4a8Words {
  static constexpr int kAcc = 2, kShift = 0;
  static const int8_t* x(const MxGemmArgs& a, int64_t row, int64_t b) {
    return reinterpret_cast<const int8_t*>(a.xh + row * a.ldx + b * 32);
  }
  template <int R, int C>
  __attribute__((always_inline)) static void accumulate(const uint8_t* const (&wrow)[C],
                                                        const int8_t* const (&x)[R],
                                                        __m256i (&acc)[R][C][kAcc]) {
#pragma GCC unroll 2
    for (int j = 0; j < 8; ++j) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        __m256i w[4];
        w4a8_words(wrow[c] + 32 * j, w);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) w4a8_words_step(w, x[r] + 8 * j, acc[r][c]);
      }
    }
  }
  __attribute__((always_inline)) static __m256i dot(const __m256i (&acc)[kAcc], int h,
                                                    const MxGemmArgs&, int64_t) {
    return acc[h];
  }
};

// W4A8, one row, where nothing shares the decode: prepare_w4a8_avx2 also writes each 14-bit
// activation x as 170 h + l with h and l bytes in [-85, 85] (per block 32 bytes of h, then 32
// of l, in k order) and the block's sum of x. The panel rows decode as W4A4's offset bytes,
// and a byte multiply-add against h and one against l each sum four k per column into 16-bit
// lanes, exactly: a lane adds 16 products of at most 24 * 85 per block. 170 (h sums) + (l
// sums) - 12 sum(x) is then the block's exact dot over the values, and 256 times it the int16
// kernel's. 13 vector operations per 64 weights instead of 19, for 5 more per block and
// column half, which several rows would pay each (W4a8Words shares its dearer decode).
struct W4a8Bytes {
  static constexpr int kAcc = 4, kShift = 8;
  static const int8_t* x(const MxGemmArgs& a, int64_t row, int64_t b) {
    return a.xhb + row * 2 * a.ldx + b * 64;
  }
  template <int R, int C>
  __attribute__((always_inline)) static void accumulate(const uint8_t* const (&wrow)[C],
                                                        const int8_t* const (&x)[R],
                                                        __m256i (&acc)[R][C][kAcc]) {
    static_assert(R == 1, "several rows take W4a8Words");
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const __m256i xh = broadcast4(x[0] + 4 * j), xl = broadcast4(x[0] + 32 + 4 * j);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        __m256i lo, hi;
        offset_codes(wrow[c] + 32 * j, lo, hi);
        acc[0][c][0] = _mm256_add_epi16(acc[0][c][0], _mm256_maddubs_epi16(lo, xh));
        acc[0][c][1] = _mm256_add_epi16(acc[0][c][1], _mm256_maddubs_epi16(hi, xh));
        acc[0][c][2] = _mm256_add_epi16(acc[0][c][2], _mm256_maddubs_epi16(lo, xl));
        acc[0][c][3] = _mm256_add_epi16(acc[0][c][3], _mm256_maddubs_epi16(hi, xl));
      }
      keep_chains(acc);
    }
  }
  __attribute__((always_inline)) static __m256i dot(const __m256i (&acc)[kAcc], int h,
                                                    const MxGemmArgs& a, int64_t xi) {
    const __m256i sum =
        _mm256_add_epi32(_mm256_madd_epi16(acc[h], _mm256_set1_epi16(kW4a8PlaneSplit)),
                         _mm256_madd_epi16(acc[2 + h], _mm256_set1_epi16(1)));
    return _mm256_sub_epi32(sum, _mm256_set1_epi32(kMxFp4WeightOffset * a.xsum[xi]));
  }
};

// One table of tile functions per kernel: kind 0 E4M3 (FP32), 2 W4A4 (int8), 3 W4A8 (int16).
template <int Kind, int R, int C>
void tile_of(const MxGemmArgs& a, int64_t row, int64_t panel, int64_t cols);
// Only the shapes for_each_tile can ask for (at most the row count's panels) are compiled.
template <int Kind, int R, int C>
constexpr TileFn tile_fn() {
  if constexpr (C > (Kind == 3 ? kW4a8Panels : kPanels)[R]) {
    return nullptr;
  } else {
    return &tile_of<Kind, R, C>;
  }
}
template <int Kind, int R, int C>
void tile_of(const MxGemmArgs& a, int64_t row, int64_t panel, int64_t cols) {
  if constexpr (Kind == 3 && R == 1) {
    tile_int<W4a8Bytes, R, C>(a, row, panel, cols);
  } else if constexpr (Kind == 3) {
    tile_int<W4a8Words, R, C>(a, row, panel, cols);
  } else if constexpr (Kind == 2) {
    tile_int<W4a4, R, C>(a, row, panel, cols);
  } else {
    tile<R, C>(a, row, panel, cols);
  }
}
template <int Kind>
struct MxTiles {
  template <int R, int C>
  static constexpr TileFn fn() {
    return tile_fn<Kind, R, C>();
  }
};
constexpr auto kFp8Tiles = tile_table<TileFn, kMaxRows, kMaxPanels, MxTiles<0>>();
constexpr auto kW4a4Tiles = tile_table<TileFn, kMaxRows, kMaxPanels, MxTiles<2>>();
constexpr auto kW4a8Tiles = tile_table<TileFn, kMaxRows, kMaxPanels, MxTiles<3>>();

// Rows in L2-sized blocks; row tiles of up to four, sized evenly, as in the BF16 kernel.
template <typename Table>
void run_tiles(const MxGemmArgs& a, int64_t n_begin, int64_t n_end, const Table& tiles,
               int max_rows = kMaxRows, const int* panels_for_rows = kPanels) {
  run_tile_table(tiles, a, n_begin, n_end, kP, max_rows, panels_for_rows);
}

// Many rows (prefill): each block of a panel is widened once into an L1 buffer of FP32 raw
// codes, and row tiles of up to six rows run their block chains from it, as the BF16 kernel
// does from its panels. Every output sees exactly the operations of the direct tiles above
// (one FMA chain per block from zero, then the scale into the total), so results match them
// bit for bit. Up to twelve rows (batched decode) the direct tiles are faster: lm_head at
// 151,936 x 2048, two threads, took 32-34 ms against 36 at 6 rows, 38 against 44 at 8 and 54
// against 55-57 at 12; at 16 the two were level and at 24 the wide pass led (97-100 ms
// against 109-110).
constexpr int64_t kWideMinRows = 13, kWideRows = 6, kWideBlockRows = 192;

// Blocks [0, nblk) of a widened group for R rows: per block, one chain per output from zero
// and its sum times the block's scale into the total.
template <int R>
void wide_rows(const float* wbuf, int64_t nblk, const float* x, int64_t ldx, const __m256* s,
               float* total) {
  for (int64_t b = 0; b < nblk; ++b, wbuf += 32 * kP, x += 32, s += 2) {
    __m256 acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int k = 0; k < 32; ++k) {
      // Twelve accumulators, the two weight halves and one broadcast at a time.
      const __m256 lo = _mm256_load_ps(wbuf + k * kP);
      const __m256 hi = _mm256_load_ps(wbuf + k * kP + 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 xb = _mm256_broadcast_ss(x + r * ldx + k);
        acc[r][0] = _mm256_fmadd_ps(xb, lo, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xb, hi, acc[r][1]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        float* t = total + r * kP + 8 * h;
        _mm256_store_ps(t, _mm256_fmadd_ps(acc[r][h], s[h], _mm256_load_ps(t)));
      }
    }
    // Without it GCC keeps a second copy of the totals on the stack across blocks and pays
    // twelve more loads and stores a block for it (about 4% of the prefill GEMM).
    asm volatile("" : : "r"(total) : "memory");
  }
}

using WideRowsFn = void (*)(const float*, int64_t, const float*, int64_t, const __m256*, float*);
constexpr WideRowsFn kWideRowsFns[kWideRows + 1] = {
    nullptr, wide_rows<1>, wide_rows<2>, wide_rows<3>, wide_rows<4>, wide_rows<5>, wide_rows<6>};

// Blocks widened at a time: 8 KB of FP32 codes, which stay in L1 while every row tile of the
// row block passes over them.
constexpr int64_t kWideGroupBlocks = 4;

// Panels widened in turn over one row block: the activations of a group of blocks (up to 192
// rows x 128 k, 96 KB) stay in L2 while every panel of the set passes over them, instead of
// all k of the row block streaming from L3 once per panel. Their totals (up to 96 KB, on the
// stack) stay in L2 as well.
constexpr int64_t kWidePanels = 8;

// The totals of a wide pass (rows [row0, row0 + m) of panels [p0, p0 + np)) times 2^g into y.
void store_wide_totals(const MxGemmArgs& a, const float (&total)[kWidePanels][kWideBlockRows * kP],
                       int64_t row0, int64_t m, int64_t p0, int64_t np, int64_t n_end) {
  const __m256 post = _mm256_set1_ps(a.w->post);
  for (int64_t i = 0; i < np; ++i) {
    const int64_t cols = std::min(n_end - (p0 + i) * kP, kP);
    for (int64_t r = 0; r < m; ++r) {
      float* y = a.y + (row0 + r) * a.ldy + (p0 + i) * kP - a.y_col0;
      const __m256 lo = _mm256_mul_ps(_mm256_load_ps(total[i] + r * kP), post);
      const __m256 hi = _mm256_mul_ps(_mm256_load_ps(total[i] + r * kP + 8), post);
      if (cols >= kP) {
        _mm256_storeu_ps(y, lo);
        _mm256_storeu_ps(y + 8, hi);
      } else {
        store_partial(y, lo, hi, cols);
      }
    }
  }
}

// Rows [row0, row0 + m) (m <= kWideBlockRows) of panels [p0, p0 + np) (np <= kWidePanels);
// output columns end at n_end. P, the kernel's part: kBlockBytes, kRows (the widest row
// tile), Buffer (one group of blocks of a panel as its tiles read it), decode(codes, nblk,
// buffer) and tile(rows, buffer, nblk, a, row, b0, s, total), one row tile over the group.
// The group's activations are read where they lie: mx_decoded_stride keeps rows off a
// power-of-two distance, so that a group's 512-byte pieces of 192 rows spread over the L2's
// sets and stay there while every panel of the set passes over them. (Copied into a buffer
// with rows 512 bytes apart, as before that padding, W8A8 prefill ran 2.5% slower: 297.5
// against 305.0 tok/s, medians of four alternations.)
template <typename P>
void wide_panels(const MxGemmArgs& a, int64_t row0, int64_t m, int64_t p0, int64_t np,
                 int64_t n_end) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32;
  alignas(32) float total[kWidePanels][kWideBlockRows * kP];
  for (int64_t i = 0; i < np; ++i) std::fill(total[i], total[i] + m * kP, 0.0f);
  alignas(32) typename P::Buffer buffer;
  alignas(32) __m256 scales[kWidePanels][kGroupBlocks * 2];
  const int64_t tiles = (m + P::kRows - 1) / P::kRows;
  for (int64_t b0 = 0; b0 < nb; b0 += kWideGroupBlocks) {
    const int64_t nblk = std::min(kWideGroupBlocks, nb - b0);
    for (int64_t i = 0; i < np; ++i) {
      const int64_t panel = p0 + i;
      if (b0 % kGroupBlocks == 0) {
        block_scales<1>(w, panel, b0, std::min(nb, b0 + kGroupBlocks), nb, scales[i]);
      }
      P::decode(w.codes + (panel * nb + b0) * P::kBlockBytes, nblk, buffer);
      // Without it the loads of the widening pass waited on L3 or DRAM for half of its time.
      prefetch_next_group(w, panel, 1, b0 + kWideGroupBlocks, nb, kWideGroupBlocks, np,
                          mx_panels(n_end), P::kBlockBytes);
      const __m256* s = scales[i] + (b0 % kGroupBlocks) * 2;
      for (int64_t t = 0, r = 0; t < tiles; ++t) {
        const int64_t left = m - r;
        const int64_t rows = left / (tiles - t) + (left % (tiles - t) != 0);
        P::tile(rows, buffer, nblk, a, row0 + r, b0, s, total[i] + r * kP);
        r += rows;
      }
    }
  }
  store_wide_totals(a, total, row0, m, p0, np, n_end);
}

// E4M3's part: each block widened into FP32 raw codes, row tiles of up to six.
struct Fp8Wide {
  static constexpr int64_t kBlockBytes = mx_panel_block_bytes(ElemFormat::kE4M3);
  static constexpr int64_t kRows = kWideRows;
  using Buffer = float[kWideGroupBlocks * 32 * kP];
  static void decode(const uint8_t* codes, int64_t nblk, Buffer& buffer) {
    constexpr int Q = 2;
    for (int64_t g = 0; g < nblk; ++g, codes += kBlockBytes) {
      float* dst = buffer + g * 32 * kP;
#pragma GCC unroll 4
      for (int j = 0; j < 32 / Q; ++j) {
        __m256 wv[4];
        widen4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 32 * j)), wv);
#pragma GCC unroll 4
        for (int q = 0; q < Q; ++q) {
          _mm256_store_ps(dst + (Q * j + q) * kP, wv[2 * q]);
          _mm256_store_ps(dst + (Q * j + q) * kP + 8, wv[2 * q + 1]);
        }
      }
    }
  }
  static void tile(int64_t rows, const Buffer& buffer, int64_t nblk, const MxGemmArgs& a,
                   int64_t row, int64_t b0, const __m256* s, float* total) {
    kWideRowsFns[rows](buffer, nblk, a.x + row * a.ldx + b0 * 32, a.ldx, s, total);
  }
};

// W4A8 with many rows (prefill, and batched decode's lm_head): each group of four blocks of a
// panel is decoded once into L1 as W4a8Words's int16 lane vectors, and row tiles of up to four
// rows run from there with W4a8Words's operations per output (an exact integer dot per block,
// then the same scaling), so results match the direct tiles bit for bit. The direct tiles
// decode every panel row again for each four rows: eleven operations per 64 weights beside
// eight per row. (W4A4's decode is five operations; its direct tiles ran as fast as this pass.)
constexpr int64_t kW4a8WideMinRows = 5, kW4a8WideRows = 4;

// Blocks [0, nblk) of a decoded group for R rows: per block, the exact dots of W4a8Words and
// their scaling into the totals.
template <int R>
void wide_rows_w4a8(const __m256i* wbuf, int64_t nblk, const int16_t* x, int64_t ldx,
                    const float* xscale, int64_t nb, const __m256* s, float* total) {
  const __m256 unit = _mm256_set1_ps(0x1p-62f);  // mx_panel_scale_unit(kE2M1)
  for (int64_t b = 0; b < nblk; ++b, wbuf += 32, x += 32, s += 2) {
    __m256i acc[R][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int j = 0; j < 8; ++j) {
      const __m256i w[4] = {_mm256_load_si256(wbuf + 4 * j), _mm256_load_si256(wbuf + 4 * j + 1),
                            _mm256_load_si256(wbuf + 4 * j + 2),
                            _mm256_load_si256(wbuf + 4 * j + 3)};
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        w4a8_words_step(w, reinterpret_cast<const int8_t*>(x + r * ldx + 4 * j), acc[r]);
      }
      // As keep_chains: without it GCC keeps the accumulators on the stack.
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) asm("" : "+x"(acc[r][0]), "+x"(acc[r][1]));
    }
    // The weights' half of each scale once for the tile's rows (GCC computed it per row).
    const __m256 sw[2] = {_mm256_mul_ps(s[0], unit), _mm256_mul_ps(s[1], unit)};
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 xs = _mm256_set1_ps(xscale[r * nb + b]);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256 scale = _mm256_mul_ps(sw[h], xs);
        float* t = total + r * kP + 8 * h;
        _mm256_store_ps(t,
                        _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][h]), scale, _mm256_load_ps(t)));
      }
    }
    // As in wide_rows: the totals stay in memory only.
    asm volatile("" : : "r"(total) : "memory");
  }
}

using WideRowsW4a8Fn = void (*)(const __m256i*, int64_t, const int16_t*, int64_t, const float*,
                                int64_t, const __m256*, float*);
constexpr WideRowsW4a8Fn kWideRowsW4a8Fns[kW4a8WideRows + 1] = {
    nullptr, wide_rows_w4a8<1>, wide_rows_w4a8<2>, wide_rows_w4a8<3>, wide_rows_w4a8<4>};

// W4A8's part of wide_panels.
struct W4a8Wide {
  static constexpr int64_t kBlockBytes = mx_panel_block_bytes(ElemFormat::kE2M1);
  static constexpr int64_t kRows = kW4a8WideRows;
  using Buffer = __m256i[kWideGroupBlocks * 32];
  static void decode(const uint8_t* codes, int64_t nblk, Buffer& buffer) {
    for (int64_t q = 0; q < 8 * nblk; ++q) {
      __m256i v[4];
      w4a8_words(codes + 32 * q, v);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) _mm256_store_si256(buffer + 4 * q + t, v[t]);
    }
  }
  static void tile(int64_t rows, const Buffer& buffer, int64_t nblk, const MxGemmArgs& a,
                   int64_t row, int64_t b0, const __m256* s, float* total) {
    const int64_t nb = (a.w->k + 31) / 32;
    kWideRowsW4a8Fns[rows](buffer, nblk, a.xh + row * a.ldx + b0 * 32, a.ldx,
                           a.xscale + row * nb + b0, nb, s, total);
  }
};

// Rows in blocks of kWideBlockRows, columns [n_begin, n_end) in sets of kWidePanels panels,
// each through pass(a, row0, m, p0, np, n_end).
template <typename Pass>
void wide_blocks(const MxGemmArgs& a, int64_t n_begin, int64_t n_end, Pass&& pass) {
  const int64_t p_begin = n_begin / kP, p_end = (n_end + kP - 1) / kP;
  for (int64_t r0 = 0; r0 < a.m; r0 += kWideBlockRows) {
    const int64_t m = std::min(kWideBlockRows, a.m - r0);
    for (int64_t p = p_begin; p < p_end; p += kWidePanels) {
      pass(a, r0, m, p, std::min(kWidePanels, p_end - p), n_end);
    }
  }
}

void mx_gemm_avx2(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.m < kWideMinRows) {
    run_tiles(a, n_begin, n_end, kFp8Tiles);
    return;
  }
  wide_blocks(a, n_begin, n_end, wide_panels<Fp8Wide>);
}

// One row (decode) of an integer kernel K, C panels per tile, with each block's scale built
// as an exponent (tile_int's exp), where that gives the same scale as the multiplies: no
// chunk scales, activation scales that are normal powers of two, and every stored scale
// already normal after 2^(64 - f) and normal again with the activation's. Then per half panel
// and block an add and a shift replace two multiplies and the dot's shift, and the epilogue
// loses the chunk-scale branch. mx_bench, one thread, three alternations: W4A8 21.0 -> 21.5
// GB/s at K = N = 2048 and 21.4 -> 22.2 at N = 256 (L2); W4A4 27.3 -> 27.9. False where it
// does not apply.
template <typename K, int C>
bool one_row_exp(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int64_t kMaxBlocks = 1024;
  int32_t exp[kMaxBlocks];
  if (!mx_one_row_scale_exps(a, K::kShift, exp, kMaxBlocks)) return false;
  for_each_row_tile<C>(n_begin, n_end, kP, [&](auto panels, int64_t p, int64_t cols) {
    tile_int<K, 1, decltype(panels)::value>(a, 0, p, cols, exp);
  });
  return true;
}

void mx_gemm_w4a4_avx2(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (one_row_exp<W4a4, kPanels[1]>(a, n_begin, n_end)) return;
  run_tiles(a, n_begin, n_end, kW4a4Tiles);
}

void mx_gemm_w4a8_avx2(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (one_row_exp<W4a8Bytes, kW4a8Panels[1]>(a, n_begin, n_end)) return;
  if (a.m < kW4a8WideMinRows) {
    run_tiles(a, n_begin, n_end, kW4a8Tiles, kMaxRows, kW4a8Panels);
    return;
  }
  wide_blocks(a, n_begin, n_end, wide_panels<W4a8Wide>);
}

}  // namespace

const MxGemmKernels kAvx2MxGemm = {
    IsaLevel::kAvx2,   "avx2",       pack_mx_weights,   decode_avx2,
    prepare_w4a8_avx2, mx_gemm_avx2, mx_gemm_w4a4_avx2, mx_gemm_w4a8_avx2};

}  // namespace mx::mx_gemm_detail
