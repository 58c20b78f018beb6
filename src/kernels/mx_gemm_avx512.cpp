// AVX-512 MX GEMM over this ISA's own panels (pack_mx_weights_avx512): sixteen
// columns per panel, one column per dword lane, so that a 64-byte panel row feeds a whole
// 512-bit vector. E4M3 weights: a row holds four k, widened to four FP32 vectors with shifts
// and a mask, each one FMA per tile row. E2M1 weights: a row holds eight k, decoded to two
// vectors of offset bytes, and VNNI's vpdpbusd sums four byte products per column straight
// into int32 lanes, against E2M1 activations (W4A4) and against the two byte planes of the
// 14-bit E4M3 ones (W4A8). Each output sees the scalar kernels' operations in their order:
// one FMA chain per block from zero then the scaled sum into the total (E4M3), an exact integer
// dot scaled the same way (E2M1), so results equal the scalar table's bit for bit.
//
// Compiled with AVX-512 flags: nothing here instantiates an inline function of a shared header
// that another translation unit could link in its place (see formats/act_quant.h).
#include <immintrin.h>

#include <array>
#include <utility>

#include "kernels/mx_avx512_util.h"
#include "kernels/mx_gemm.h"
#include "kernels/mx_prefetch.h"
#include "kernels/tile_plan.h"

namespace mx::mx_gemm_detail {
namespace {

constexpr int64_t kP = kMxPanelCols;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The four FP32 vectors of an E4M3 panel row: w[t] holds byte t of every dword lane (k = 4j +
// t of column lane) as FP32 bits, the exponent bias left to the block scale (mx_gemm.h's
// f = 120). A 16-bit arithmetic shift right by 4 puts bytes 1 and 3 at bits 4..11 of their
// halves with the sign spread above; bytes 0 and 2 get there after a 16-bit shift left by 8.
// The mask keeps sign, exponent and mantissa.
__attribute__((always_inline)) inline void widen4(__m512i v, __m512 (&w)[4]) {
  const __m512i mask = _mm512_set1_epi32(static_cast<int>(0x87F00000u));
  const __m512i odd = _mm512_srai_epi16(v, 4);
  const __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(v, 8), 4);
  w[0] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(even, 16), mask));
  w[1] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_slli_epi32(odd, 16), mask));
  w[2] = _mm512_castsi512_ps(_mm512_and_si512(even, mask));
  w[3] = _mm512_castsi512_ps(_mm512_and_si512(odd, mask));
}

// E4M3, R rows by C panels: per block one FMA chain per output over its 32 k in order, then
// the chain's sum times the block's scale vector into the total; R * C chains in flight.
template <int R, int C>
void tile_fp8(const MxGemmArgs& a, int64_t row, int64_t panel, int64_t cols) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32, nc = (w.k + 511) / 512;
  __m512 total[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) total[r][c] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    // The codes 1 KB ahead: one-row W8A8 decode 39.6 -> 44.4-46.1 tok/s.
    prefetch_blocks_ahead(w, panel, C, nb, b, 2, 512);
    const float* x[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) x[r] = a.x + (row + r) * a.ldx + b * 32;
    __m512 acc[R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t j = 0; j < 8; ++j) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const uint8_t* p = w.codes + ((panel + c) * nb + b) * 512 + 64 * j;
        __m512 wv[4];
        widen4(_mm512_loadu_si512(p), wv);
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
#pragma GCC unroll 8
          for (int r = 0; r < R; ++r)
            acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(x[r][4 * j + t]), wv[t], acc[r][c]);
        }
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 s = scale_vec(w, panel + c, b, nb, nc);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) total[r][c] = _mm512_fmadd_ps(acc[r][c], s, total[r][c]);
    }
  }
  store_tile(total, a, row, panel, cols);
}

// A 64-byte E2M1 panel row as two vectors of offset bytes 2 * value + 12 (vpshufb on a
// sixteen-entry table): lo holds k = 8j .. 8j + 3 of each column lane, hi k = 8j + 4 .. 8j + 7.
__attribute__((always_inline)) inline void offset_codes(const uint8_t* p, __m512i& lo,
                                                        __m512i& hi) {
  const __m512i lut = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  const __m512i v = _mm512_loadu_si512(p);
  lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, nibble));
  hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble));
}

// acc + vpdpbusd(w, the four bytes at p in every dword), the bytes broadcast from memory
// inside the instruction ({1to16}), which GCC does not fold from the intrinsics.
__attribute__((always_inline)) inline __m512i dpbusd_at(__m512i acc, __m512i w, const int8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const int8_t(*)[4]>(p)));
  return acc;
}

// E2M1 weights, R rows by C panels: per block two int32 accumulators per output that
// vpdpbusd fills exactly. W4A4 (kW4a8 false): the offset weights against the int8
// activations, one accumulator for k 8j..8j+3 and one for the rest; the dot is their sum, the
// first started at -12 * sum(x), the offset's share. W4A8: against the high and the low byte
// planes of x = 170 h + l (prepare_w4a8 of the AVX2 table writes them in k order), one
// accumulator each, the low one started at -12 * sum(x); the dot is 256 * (170 H + L), the
// int16 kernels' exactly. Either is then scaled as int_gemm_scalar does, or with exp (one
// row, mx_one_row_scale_exps) each block's scale is built as an exponent and the dot taken
// without the factor 256.
//
// Each block asks for the codes sixteen blocks (4 KB) ahead into L2 (mx_prefetch.h). With the
// hardware prefetcher alone a four-row tile, computing for twice as long as its codes take to
// arrive, waited on them (lm_head at batch 8: 18.6 ms of a step without, 12.6-13.0 with 2 KB
// into L1); into L1 one row ran 3-5% slower, into L2 the Qwen3.5-shaped W4A8 decode went from
// 74.4 / 75.8 to 79.2 / 79.5 tok/s (W4A4 level).

// A block's exact dot from tile_int's two accumulators (W4A8: 170 H + L, without the 256).
template <bool kW4a8>
__attribute__((always_inline)) inline __m512i int_dot(const __m512i (&acc)[2]) {
  if constexpr (kW4a8) {
    return _mm512_add_epi32(_mm512_mullo_epi32(acc[0], _mm512_set1_epi32(kW4a8PlaneSplit)), acc[1]);
  } else {
    return _mm512_add_epi32(acc[0], acc[1]);
  }
}

template <bool kW4a8, int R, int C>
void tile_int(const MxGemmArgs& a, int64_t row, int64_t panel, int64_t cols,
              const int32_t* exp = nullptr) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32, nc = (w.k + 511) / 512;
  const __m512 unit = _mm512_set1_ps(0x1p-62f);  // mx_panel_scale_unit(kE2M1)
  __m512 total[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) total[r][c] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_blocks_ahead(w, panel, C, nb, b, 16, 256, true);
    const int8_t* x[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      x[r] = kW4a8 ? a.xhb + (row + r) * 2 * a.ldx + b * 64 : a.xq + (row + r) * a.ldx + b * 32;
    }
    __m512i acc[R][C][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i offset = _mm512_set1_epi32(-kMxFp4WeightOffset * a.xsum[(row + r) * nb + b]);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        acc[r][c][kW4a8 ? 0 : 1] = _mm512_setzero_si512();
        acc[r][c][kW4a8 ? 1 : 0] = offset;
      }
    }
#pragma GCC unroll 4
    for (int64_t j = 0; j < 4; ++j) {
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        __m512i lo, hi;
        offset_codes(w.codes + ((panel + c) * nb + b) * 256 + 64 * j, lo, hi);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          if constexpr (kW4a8) {
            const int8_t* h = x[r] + 8 * j;
            const int8_t* l = x[r] + 32 + 8 * j;
            acc[r][c][0] = dpbusd_at(acc[r][c][0], lo, h);
            acc[r][c][1] = dpbusd_at(acc[r][c][1], lo, l);
            acc[r][c][0] = dpbusd_at(acc[r][c][0], hi, h + 4);
            acc[r][c][1] = dpbusd_at(acc[r][c][1], hi, l + 4);
          } else {
            acc[r][c][0] = dpbusd_at(acc[r][c][0], lo, x[r] + 8 * j);
            acc[r][c][1] = dpbusd_at(acc[r][c][1], hi, x[r] + 8 * j + 4);
          }
        }
      }
    }
    if constexpr (R == 1) {
      if (exp != nullptr) {
        const __m512i e = _mm512_set1_epi32(exp[b]);
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          const __m128i bytes = _mm_loadu_si128(
              reinterpret_cast<const __m128i*>(w.scales + ((panel + c) * nb + b) * kP));
          const __m512 scale = _mm512_castsi512_ps(
              _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtepu8_epi32(bytes), e), 23));
          total[0][c] =
              _mm512_fmadd_ps(_mm512_cvtepi32_ps(int_dot<kW4a8>(acc[0][c])), scale, total[0][c]);
        }
        continue;
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      const __m512 s = _mm512_mul_ps(scale_vec(w, panel + c, b, nb, nc), unit);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int64_t xi = (row + r) * nb + b;
        __m512i dot = int_dot<kW4a8>(acc[r][c]);
        if constexpr (kW4a8) dot = _mm512_slli_epi32(dot, 8);
        const __m512 scale = _mm512_mul_ps(s, _mm512_set1_ps(a.xscale[xi]));
        total[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, total[r][c]);
      }
    }
  }
  store_tile(total, a, row, panel, cols);
}

using TileFn = void (*)(const MxGemmArgs&, int64_t, int64_t, int64_t);
constexpr int kMaxRows = 8, kMaxPanels = 4;
// Panels per tile for each row count: four or more independent chains (more panels for one
// row measured no faster), the accumulators and totals within the 32 vector registers.
constexpr int kPanels[kMaxRows + 1] = {0, 4, 4, 2, 2, 1, 1, 1, 1};
// E4M3's direct tiles stop at four rows: the wide path takes six rows or more, and eight-row
// direct tiles, faster in mx_bench at eight rows, made batch-8 W8A8 decode 20% slower in
// the model (lm_head from memory). The integer tiles take up to eight rows (one decode of a
// panel row feeds twice the rows: W4A8 prefill +10%).
constexpr int kFp8MaxRows = 4;

// Kind 0: E4M3 (FP32); 1: W4A4; 2: W4A8.
template <int Kind, int R, int C>
void tile_of(const MxGemmArgs& a, int64_t row, int64_t panel, int64_t cols) {
  if constexpr (Kind == 0) {
    tile_fp8<R, C>(a, row, panel, cols);
  } else {
    tile_int<Kind == 2, R, C>(a, row, panel, cols);
  }
}
template <int Kind, int R, int C>
constexpr TileFn tile_fn() {
  if constexpr (C > kPanels[R] || (Kind == 0 && R > kFp8MaxRows)) {
    return nullptr;
  } else {
    return &tile_of<Kind, R, C>;
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
constexpr auto kW4a4Tiles = tile_table<TileFn, kMaxRows, kMaxPanels, MxTiles<1>>();
constexpr auto kW4a8Tiles = tile_table<TileFn, kMaxRows, kMaxPanels, MxTiles<2>>();

template <typename Table>
void run_tiles(const MxGemmArgs& a, int64_t n_begin, int64_t n_end, const Table& tiles,
               int max_rows = kMaxRows) {
  run_tile_table(tiles, a, n_begin, n_end, kP, max_rows, kPanels);
}

// Many rows (prefill), E4M3: a group of blocks of one or two panels is widened once into an
// L1 buffer of FP32 raw codes, a vector per k and panel, and row tiles run their chains from
// it: up to eight rows over two panels (each row's broadcast feeds two FMAs, ten loads per
// sixteen FMAs) or twelve over a last odd panel. Every output sees the direct tiles'
// operations, so the results match them bit for bit. Up to twelve rows (batched decode) the
// direct tiles are faster: lm_head at 151,936 x 2048, two threads, took 26-28 ms against 30 at
// 6 rows, 26-28 against 36 at 8 and 39-40 against 44-45 at 12; level at 16, and at 24 the wide
// pass led (74-77 ms against 80-81).
constexpr int64_t kWideMinRows = 13, kWideBlockRows = 192, kWideGroupBlocks = 4;
constexpr int64_t kWidePanels = 8;
constexpr int kWideRows[3] = {0, 12, 8};  // rows per tile for Q panels

// Q panels' blocks [0, nblk) for R rows: wbuf holds per block 32 k of Q vectors, s the
// blocks' scale vectors (Q per block), total the rows' totals (panel q's at q * tstride).
template <int R, int Q>
void wide_rows(const float* wbuf, int64_t nblk, const float* x, int64_t ldx, const __m512* s,
               float* total, int64_t tstride) {
  for (int64_t b = 0; b < nblk; ++b, wbuf += 32 * Q * kP, x += 32, s += Q) {
    __m512 acc[R][Q];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) acc[r][q] = _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int k = 0; k < 32; ++k) {
      __m512 wv[Q];
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) wv[q] = _mm512_load_ps(wbuf + (k * Q + q) * kP);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m512 xb = _mm512_set1_ps(x[r * ldx + k]);
#pragma GCC unroll 2
        for (int q = 0; q < Q; ++q) acc[r][q] = _mm512_fmadd_ps(xb, wv[q], acc[r][q]);
      }
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) {
        float* t = total + q * tstride + r * kP;
        _mm512_store_ps(t, _mm512_fmadd_ps(acc[r][q], s[q], _mm512_load_ps(t)));
      }
    }
  }
}

using WideRowsFn = void (*)(const float*, int64_t, const float*, int64_t, const __m512*, float*,
                            int64_t);
constexpr WideRowsFn kWideOne[kWideRows[1] + 1] = {
    nullptr,          wide_rows<1, 1>,  wide_rows<2, 1>, wide_rows<3, 1>, wide_rows<4, 1>,
    wide_rows<5, 1>,  wide_rows<6, 1>,  wide_rows<7, 1>, wide_rows<8, 1>, wide_rows<9, 1>,
    wide_rows<10, 1>, wide_rows<11, 1>, wide_rows<12, 1>};
constexpr WideRowsFn kWideTwo[kWideRows[2] + 1] = {
    nullptr,         wide_rows<1, 2>, wide_rows<2, 2>, wide_rows<3, 2>, wide_rows<4, 2>,
    wide_rows<5, 2>, wide_rows<6, 2>, wide_rows<7, 2>, wide_rows<8, 2>};

// Rows [row0, row0 + m) of panels [p0, p0 + np); output columns end at n_end. The activations
// of a group of blocks stay in L2 while every panel of the set passes over them.
void wide_panels(const MxGemmArgs& a, int64_t row0, int64_t m, int64_t p0, int64_t np,
                 int64_t n_end) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32, nc = (w.k + 511) / 512;
  constexpr int64_t kStride = kWideBlockRows * kP;
  alignas(64) float total[kWidePanels][kStride];
  for (int64_t i = 0; i < np; ++i) {
    for (int64_t r = 0; r < m; ++r) _mm512_store_ps(total[i] + r * kP, _mm512_setzero_ps());
  }
  alignas(64) float wbuf[kWideGroupBlocks * 32 * 2 * kP];
  for (int64_t b0 = 0; b0 < nb; b0 += kWideGroupBlocks) {
    const int64_t nblk = min64(kWideGroupBlocks, nb - b0);
    for (int64_t i = 0; i < np; i += 2) {
      const int q = np - i >= 2 ? 2 : 1;
      __m512 s[kWideGroupBlocks * 2];
      for (int64_t g = 0; g < nblk; ++g) {
        for (int qq = 0; qq < q; ++qq) {
          const int64_t panel = p0 + i + qq;
          s[g * q + qq] = scale_vec(w, panel, b0 + g, nb, nc);
          const uint8_t* codes = w.codes + (panel * nb + b0 + g) * 512;
          float* dst = wbuf + g * 32 * q * kP + qq * kP;
#pragma GCC unroll 2
          for (int j = 0; j < 8; ++j) {
            __m512 wv[4];
            widen4(_mm512_loadu_si512(codes + 64 * j), wv);
#pragma GCC unroll 4
            for (int t = 0; t < 4; ++t) _mm512_store_ps(dst + (4 * j + t) * q * kP, wv[t]);
          }
        }
      }
      prefetch_next_group(w, p0 + i, q, b0 + kWideGroupBlocks, nb, kWideGroupBlocks, np,
                          mx_panels(n_end), mx_panel_block_bytes(ElemFormat::kE4M3));
      even_row_tiles(m, kWideRows[q], [&](int64_t r, int64_t rows) {
        (q == 2 ? kWideTwo : kWideOne)[rows](wbuf, nblk, a.x + (row0 + r) * a.ldx + b0 * 32, a.ldx,
                                             s, total[i] + r * kP, kStride);
      });
    }
  }
  store_wide_totals(a, total[0], kStride, row0, m, p0, np, n_end);
}

void mx_gemm_avx512(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.m < kWideMinRows) {
    run_tiles(a, n_begin, n_end, kFp8Tiles, kFp8MaxRows);
    return;
  }
  const int64_t p_begin = n_begin / kP, p_end = (n_end + kP - 1) / kP;
  for (int64_t r0 = 0; r0 < a.m; r0 += kWideBlockRows) {
    const int64_t m = min64(kWideBlockRows, a.m - r0);
    for (int64_t p = p_begin; p < p_end; p += kWidePanels) {
      wide_panels(a, r0, m, p, min64(kWidePanels, p_end - p), n_end);
    }
  }
}

}  // namespace

// One row (decode) with each block's scale built as an exponent where
// mx_one_row_scale_exps allows it; false where it does not. With the offsets in the
// accumulators' start, mx_bench (one thread, K = N = 2048, three alternations): one-row W4A8
// 31.0 -> 33.0 GB/s, W4A4 43.1 -> 46.5; eight rows (offsets only) W4A8 +5%, W4A4 +3%.
template <bool kW4a8>
static bool one_row_exp(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int64_t kMaxBlocks = 1024;
  constexpr int C = kPanels[1];
  int32_t exp[kMaxBlocks];
  if (!mx_one_row_scale_exps(a, kW4a8 ? 8 : 0, exp, kMaxBlocks)) return false;
  for_each_row_tile<C>(n_begin, n_end, kP, [&](auto panels, int64_t p, int64_t cols) {
    tile_int<kW4a8, 1, decltype(panels)::value>(a, 0, p, cols, exp);
  });
  return true;
}

void gemm_w4a4_avx512(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (one_row_exp<false>(a, n_begin, n_end)) return;
  run_tiles(a, n_begin, n_end, kW4a4Tiles);
}

void gemm_w4a8_avx512(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  if (one_row_exp<true>(a, n_begin, n_end)) return;
  run_tiles(a, n_begin, n_end, kW4a8Tiles);
}

const MxGemmKernels kAvx512MxGemm = {
    IsaLevel::kAvx512, "avx512",       mx::pack_mx_weights_avx512, decode_avx2,
    prepare_w4a8_avx2, mx_gemm_avx512, gemm_w4a4_avx512,           gemm_w4a8_avx512};

}  // namespace mx::mx_gemm_detail
