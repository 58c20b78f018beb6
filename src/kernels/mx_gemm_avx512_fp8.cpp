// AVX-512 MX GEMM for E4M3 weights (W8A8) on AVX512-BF16 dot products. E4M3 values are exact in
// BF16, and vdpbf16ps adds two products per lane into an FP32 accumulator as two additions in
// a row, rounding after each, the odd element's product first (Intel's definition; on an AMD
// Zen 4, 200,000 chains of 32 random E4M3 pairs matched the scalar chain bit for bit with the
// pairs stored as (k + 1, k)). A product of two BF16 values is exact in FP32, so with k in the
// high word and k + 1 in the low one, each instruction performs the scalar kernel's next two
// FMAs of the block's chain: twice the products per instruction of FP32 FMAs, and a code
// becomes BF16 in two byte-table lookups instead of being widened to FP32.
//
// The instruction treats subnormal inputs and results as zero, where the scalar kernels'
// FP32 FMAs do not. The weights enter at their true values (the smallest, 2^-9, is normal) and
// the activations at the FP32 kernels' scale times 2^-120, so each product equals the FP32
// kernels' product. Where every nonzero decoded activation of the call is at least 64 (a true
// activation of 2^-58 or more; bf16_exact) every partial sum of a block is a multiple of a
// normal number and never subnormal; other calls run the FP32 chains over the same panels.
// Either way every output sees the scalar kernels' operations in their order: the results
// equal the scalar table's bit for bit.
//
// Panels (pack_mx_weights_avx512_bf16): a 64-byte row j holds k = 4j .. 4j + 3 of the sixteen
// columns; within each 16-byte quarter L, byte 2i + 1 holds column 4L + i at k = 4j, byte 2i at
// 4j + 1, bytes 8 + 2i + 1 and 8 + 2i at 4j + 2 and 4j + 3, so that interleaving the looked-up
// low and high BF16 bytes gives each column lane its (k + 1, k) pairs.
//
// Compiled with AVX-512 flags: nothing here instantiates an inline function of a shared header
// that another translation unit could link in its place (see formats/act_quant.h).
#include <immintrin.h>

#include <cstdint>

#include "kernels/mx_avx512_util.h"
#include "kernels/mx_gemm.h"
#include "kernels/mx_prefetch.h"
#include "kernels/tile_plan.h"

namespace mx::mx_gemm_detail {
namespace {

constexpr int64_t kP = kMxPanelCols;

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// The BF16 bits of an E4M3 magnitude (code without its sign); 0x7F is NaN, as the scalar
// tables read it.
constexpr uint16_t bf16_of_e4m3(int m) {
  if (m == 0x7F) return 0x7FC0;
  const int e = m >> 3, f = m & 7;
  if (e > 0) return static_cast<uint16_t>(((e + 120) << 7) | (f << 4));
  if (f == 0) return 0;
  // f * 2^-9 with its leading bit at position p.
  const int p = f >= 4 ? 2 : f >= 2 ? 1 : 0;
  return static_cast<uint16_t>(((p - 9 + 127) << 7) | ((f << (7 - p)) & 0x7F));
}

// One byte of every magnitude's BF16 bits, for vpermi2b (constant data: a static initializer
// here could run AVX-512 code on a processor without it).
struct alignas(64) ByteTable {
  uint8_t b[128];
};
constexpr ByteTable byte_table(bool high) {
  ByteTable t{};
  for (int m = 0; m < 128; ++m) {
    const uint16_t v = bf16_of_e4m3(m);
    t.b[m] = static_cast<uint8_t>(high ? v >> 8 : v & 0xFF);
  }
  return t;
}
constexpr ByteTable kHighBytes = byte_table(true), kLowBytes = byte_table(false);

struct Tables {
  __m512i h0, h1, l0, l1, sign;
};
__attribute__((always_inline)) inline Tables load_tables() {
  return {_mm512_load_si512(kHighBytes.b), _mm512_load_si512(kHighBytes.b + 64),
          _mm512_load_si512(kLowBytes.b), _mm512_load_si512(kLowBytes.b + 64),
          _mm512_set1_epi8(static_cast<char>(0x80))};
}

// A panel row's 64 codes as BF16 pairs: lo_k holds k = 4j and 4j + 1 of each column lane,
// hi_k k = 4j + 2 and 4j + 3, k in the high word. The sign bit is not an index bit of
// vpermi2b; it is or-ed into the high byte.
__attribute__((always_inline)) inline void bf16_pairs(const Tables& t, __m512i v, __m512i& lo_k,
                                                      __m512i& hi_k) {
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.h0, v, t.h1), v, t.sign,
                                               0xF8);  // hi | (v & sign)
  const __m512i lo = _mm512_permutex2var_epi8(t.l0, v, t.l1);
  lo_k = _mm512_unpacklo_epi8(lo, hi);
  hi_k = _mm512_unpackhi_epi8(lo, hi);
}

__attribute__((always_inline)) inline __m512 dot2(__m512 acc, __m512i w, uint32_t x) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(w),
                          reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(x))));
}

// dot2 with the pair dword broadcast from memory inside the instruction ({1to16}), which GCC
// does not fold from the intrinsics: a separate vpbroadcastd per product pair otherwise.
__attribute__((always_inline)) inline __m512 dot2_at(__m512 acc, __m512i w, const uint32_t* x) {
  asm("vdpbf16ps %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*x));
  return acc;
}

// Whether the BF16 products give the FP32 chains' bits for `m` rows of `k` decoded activations
// (factor kMxGemmInputScale): every nonzero value at least 64 and finite. A decoded value of at
// least 2^e is a multiple of 2^(e - 3) and a weight (value times 2^-120) one of 2^-129, so a
// block's products and partial sums are multiples of 2^(e - 132) >= 2^-126 where e >= 6.
bool bf16_exact(const float* x, int64_t ldx, int64_t m, int64_t k) {
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF), one = _mm512_set1_epi32(1);
  __m512i low = _mm512_set1_epi32(-1), high = _mm512_setzero_si512();
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t t = 0; t < k; t += 16) {
      const __m512i v = _mm512_and_si512(_mm512_loadu_si512(x + r * ldx + t), magnitude);
      low = _mm512_min_epu32(low, _mm512_sub_epi32(v, one));  // zero wraps to the largest
      high = _mm512_max_epu32(high, v);
    }
  }
  return _mm512_reduce_min_epu32(low) >= 0x42800000u - 1 &&  // 64.0f
         _mm512_reduce_max_epu32(high) < 0x7F800000u;        // infinity
}

// Sixteen pair dwords from 32 decoded activations: x[2d] times 2^-120 in the high word of
// dword d, x[2d + 1] in the low one (their top halves: exact, at most four significant bits).
__attribute__((always_inline)) inline __m512i act_pairs(const float* x) {
  alignas(64) static constexpr uint16_t kIdx[32] = {3,  1,  7,  5,  11, 9,  15, 13, 19, 17, 23,
                                                    21, 27, 25, 31, 29, 35, 33, 39, 37, 43, 41,
                                                    47, 45, 51, 49, 55, 53, 59, 57, 63, 61};
  const __m512 unit = _mm512_set1_ps(0x1p-120f);
  const __m512 a = _mm512_mul_ps(_mm512_loadu_ps(x), unit);
  const __m512 b = _mm512_mul_ps(_mm512_loadu_ps(x + 16), unit);
  return _mm512_permutex2var_epi16(_mm512_castps_si512(a), _mm512_load_si512(kIdx),
                                   _mm512_castps_si512(b));
}

// Rows [0, m) of x as pair dwords, pairs (per row) apart: nb blocks of sixteen.
void convert_rows(const float* x, int64_t ldx, int64_t m, int64_t nb, uint32_t* xp, int64_t pairs) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < nb; ++b)
      _mm512_store_si512(xp + r * pairs + b * 16, act_pairs(x + r * ldx + b * 32));
  }
}

// R rows by C panels: per block one chain of sixteen vdpbf16ps per output (the scalar chain's
// 32 FMAs), then the chain's sum times the block's scale vector into the total. xp: the tile's
// rows as pair dwords, `pairs` apart.
template <int R, int C>
void tile_bf16(const MxGemmArgs& a, const uint32_t* xp, int64_t pairs, int64_t row, int64_t panel,
               int64_t cols) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32, nc = (w.k + 511) / 512;
  const Tables t = load_tables();
  __m512 total[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) total[r][c] = _mm512_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    // The codes 32 blocks (16 KB) ahead: at 1 KB a one-row tile read lm_head (Qwen3.5 shape,
    // 524 MB) from memory at 26-28 GB/s on a Zen 4, at 8 KB 29-32, at 16 KB 32-33; into L2
    // rather than L1, lm_head took 11.0-15.0 ms a step against 15.8-17.8.
    prefetch_blocks_ahead(w, panel, C, nb, b, 32, 512, true);
    __m512 acc[R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int64_t j = 0; j < 8; ++j) {
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        __m512i lo_k, hi_k;
        bf16_pairs(t, _mm512_loadu_si512(w.codes + ((panel + c) * nb + b) * 512 + 64 * j), lo_k,
                   hi_k);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const uint32_t* x = xp + r * pairs + b * 16 + 2 * j;
          acc[r][c] = dot2_at(dot2_at(acc[r][c], lo_k, x), hi_k, x + 1);
        }
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m512 s = scale_vec(w, panel + c, b, nb, nc);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) total[r][c] = _mm512_fmadd_ps(acc[r][c], s, total[r][c]);
    }
  }
  store_tile(total, a, row, panel, cols);
}

using TileFn = void (*)(const MxGemmArgs&, const uint32_t*, int64_t, int64_t, int64_t, int64_t);
constexpr int kMaxRows = 8, kMaxPanels = 4;
// Panels per tile for each row count: four or more chains, accumulators and totals within
// the 32 vector registers.
constexpr int kPanels[kMaxRows + 1] = {0, 4, 4, 2, 2, 1, 1, 1, 1};
struct Bf16Tiles {
  template <int R, int C>
  static constexpr TileFn fn() {
    if constexpr (C > kPanels[R]) {
      return nullptr;
    } else {
      return &tile_bf16<R, C>;
    }
  }
};
constexpr auto kTiles = tile_table<TileFn, kMaxRows, kMaxPanels, Bf16Tiles>();

// The pair dwords the direct tiles read, on the stack: rows are converted in runs that fit.
constexpr int64_t kPairBufDwords = 16384;

void direct(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t nb = (a.w->k + 31) / 32, pairs = nb * 16;
  const int64_t run_rows = kPairBufDwords / pairs;
  alignas(64) uint32_t xp[kPairBufDwords];
  for (int64_t r0 = 0; r0 < a.m; r0 += run_rows) {
    const int64_t m = min64(run_rows, a.m - r0);
    convert_rows(a.x + r0 * a.ldx, a.ldx, m, nb, xp, pairs);
    for_each_tile(m, n_begin / kP, (n_end + kP - 1) / kP, n_end, kP, 48, kMaxRows, kPanels,
                  [&](int64_t row, int64_t rows, int64_t panel, int64_t panels, int64_t cols) {
                    kTiles[static_cast<size_t>(rows)][static_cast<size_t>(panels)](
                        a, xp + row * pairs, pairs, r0 + row, panel, cols);
                  });
  }
}

// One row by one panel on FP32 FMAs, for the calls bf16_exact refuses: the BF16 pairs
// widened to FP32 and scaled to the scalar kernel's weights (value times 2^-120, subnormal
// codes exactly so), one FMA per k in order.
void tile_f32(const MxGemmArgs& a, int64_t row, int64_t panel, int64_t cols) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32, nc = (w.k + 511) / 512;
  const Tables t = load_tables();
  const __m512 unit = _mm512_set1_ps(0x1p-120f);
  const __m512i high_word = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const float* x = a.x + row * a.ldx;
  __m512 total[1][1] = {{_mm512_setzero_ps()}};
  for (int64_t b = 0; b < nb; ++b) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < 8; ++j) {
      __m512i pair[2];
      bf16_pairs(t, _mm512_loadu_si512(w.codes + (panel * nb + b) * 512 + 64 * j), pair[0],
                 pair[1]);
      for (int h = 0; h < 2; ++h) {
        const __m512 wk = _mm512_castsi512_ps(_mm512_and_si512(pair[h], high_word));
        const __m512 wk1 = _mm512_castsi512_ps(_mm512_slli_epi32(pair[h], 16));
        const float* xk = x + b * 32 + 4 * j + 2 * h;
        acc = _mm512_fmadd_ps(_mm512_set1_ps(xk[0]), _mm512_mul_ps(wk, unit), acc);
        acc = _mm512_fmadd_ps(_mm512_set1_ps(xk[1]), _mm512_mul_ps(wk1, unit), acc);
      }
    }
    total[0][0] = _mm512_fmadd_ps(acc, scale_vec(w, panel, b, nb, nc), total[0][0]);
  }
  store_tile(total, a, row, panel, cols);
}

void fallback(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  static constexpr int kOne[2] = {0, 1};
  for_each_tile(a.m, n_begin / kP, (n_end + kP - 1) / kP, n_end, kP, 48, 1, kOne,
                [&](int64_t row, int64_t, int64_t panel, int64_t, int64_t cols) {
                  tile_f32(a, row, panel, cols);
                });
}

// Many rows (prefill): a group of four blocks of one or two panels becomes BF16 pairs once, in
// an L1 buffer, and so do the row block's activations for those blocks; row tiles run their
// chains from there, up to eight rows over two panels or twelve over a last odd one. Every
// output sees the direct tiles' operations, so the results match them bit for bit.
constexpr int64_t kWideMinRows = 13, kWideBlockRows = 192, kWideGroupBlocks = 4;
constexpr int64_t kWidePanels = 8, kGroupPairs = kWideGroupBlocks * 16;
constexpr int kWideRows[3] = {0, 12, 8};  // rows per tile for Q panels

// Q panels' blocks [0, nblk) for R rows: wbuf holds per block sixteen pairs of Q vectors, xg
// the rows' pair dwords (kGroupPairs apart), s the blocks' scale vectors (Q per block), total
// the rows' totals (panel q's at q * tstride).
template <int R, int Q>
void wide_rows(const uint32_t* wbuf, int64_t nblk, const uint32_t* xg, const __m512* s,
               float* total, int64_t tstride) {
  for (int64_t b = 0; b < nblk; ++b, wbuf += 16 * Q * kP, xg += 16, s += Q) {
    __m512 acc[R][Q];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) acc[r][q] = _mm512_setzero_ps();
    }
#pragma GCC unroll 2
    for (int p = 0; p < 16; ++p) {
      __m512i wv[Q];
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) wv[q] = _mm512_load_si512(wbuf + (p * Q + q) * kP);
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
        for (int q = 0; q < Q; ++q) acc[r][q] = dot2_at(acc[r][q], wv[q], xg + r * kGroupPairs + p);
      }
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
      for (int q = 0; q < Q; ++q) {
        float* tt = total + q * tstride + r * kP;
        _mm512_store_ps(tt, _mm512_fmadd_ps(acc[r][q], s[q], _mm512_load_ps(tt)));
      }
    }
  }
}

using WideRowsFn = void (*)(const uint32_t*, int64_t, const uint32_t*, const __m512*, float*,
                            int64_t);
constexpr WideRowsFn kWideOne[kWideRows[1] + 1] = {
    nullptr,          wide_rows<1, 1>,  wide_rows<2, 1>, wide_rows<3, 1>, wide_rows<4, 1>,
    wide_rows<5, 1>,  wide_rows<6, 1>,  wide_rows<7, 1>, wide_rows<8, 1>, wide_rows<9, 1>,
    wide_rows<10, 1>, wide_rows<11, 1>, wide_rows<12, 1>};
constexpr WideRowsFn kWideTwo[kWideRows[2] + 1] = {
    nullptr,         wide_rows<1, 2>, wide_rows<2, 2>, wide_rows<3, 2>, wide_rows<4, 2>,
    wide_rows<5, 2>, wide_rows<6, 2>, wide_rows<7, 2>, wide_rows<8, 2>};

// Q panels' group of blocks [b0, b0 + nblk) as BF16 pairs in wbuf, and their scale vectors.
void wide_weights(const MxPanelView& w, const Tables& t, int64_t panel, int q, int64_t b0,
                  int64_t nblk, uint32_t* wbuf, __m512* s) {
  const int64_t nb = (w.k + 31) / 32, nc = (w.k + 511) / 512;
  for (int64_t g = 0; g < nblk; ++g) {
    for (int qq = 0; qq < q; ++qq) {
      s[g * q + qq] = scale_vec(w, panel + qq, b0 + g, nb, nc);
      const uint8_t* codes = w.codes + ((panel + qq) * nb + b0 + g) * 512;
      uint32_t* dst = wbuf + g * 16 * q * kP + qq * kP;
#pragma GCC unroll 2
      for (int j = 0; j < 8; ++j) {
        __m512i lo_k, hi_k;
        bf16_pairs(t, _mm512_loadu_si512(codes + 64 * j), lo_k, hi_k);
        _mm512_store_si512(dst + (2 * j) * q * kP, lo_k);
        _mm512_store_si512(dst + (2 * j + 1) * q * kP, hi_k);
      }
    }
  }
}

// Rows [row0, row0 + m) of panels [p0, p0 + np); output columns end at n_end. The activations
// of a group of blocks stay in L1 and L2 while every panel of the set passes over them.
void wide_panels(const MxGemmArgs& a, int64_t row0, int64_t m, int64_t p0, int64_t np,
                 int64_t n_end) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32;
  const Tables t = load_tables();
  constexpr int64_t kStride = kWideBlockRows * kP;
  alignas(64) float total[kWidePanels][kStride];
  for (int64_t i = 0; i < np; ++i) {
    for (int64_t r = 0; r < m; ++r) _mm512_store_ps(total[i] + r * kP, _mm512_setzero_ps());
  }
  alignas(64) uint32_t wbuf[kWideGroupBlocks * 16 * 2 * kP];
  alignas(64) uint32_t xg[kWideBlockRows * kGroupPairs];
  for (int64_t b0 = 0; b0 < nb; b0 += kWideGroupBlocks) {
    const int64_t nblk = min64(kWideGroupBlocks, nb - b0);
    convert_rows(a.x + row0 * a.ldx + b0 * 32, a.ldx, m, nblk, xg, kGroupPairs);
    for (int64_t i = 0; i < np; i += 2) {
      const int q = np - i >= 2 ? 2 : 1;
      __m512 s[kWideGroupBlocks * 2];
      wide_weights(w, t, p0 + i, q, b0, nblk, wbuf, s);
      prefetch_next_group(w, p0 + i, q, b0 + kWideGroupBlocks, nb, kWideGroupBlocks, np,
                          mx_panels(n_end), mx_panel_block_bytes(ElemFormat::kE4M3));
      even_row_tiles(m, kWideRows[q], [&](int64_t r, int64_t rows) {
        (q == 2 ? kWideTwo : kWideOne)[rows](wbuf, nblk, xg + r * kGroupPairs, s, total[i] + r * kP,
                                             kStride);
      });
    }
  }
  store_wide_totals(a, total[0], kStride, row0, m, p0, np, n_end);
}

void gemm_fp8(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t nb = (a.w->k + 31) / 32;
  if (nb * 16 > kPairBufDwords || !bf16_exact(a.x, a.ldx, a.m, nb * 32)) {
    fallback(a, n_begin, n_end);
    return;
  }
  if (a.m < kWideMinRows) {
    direct(a, n_begin, n_end);
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

const MxGemmKernels kAvx512Bf16MxGemm = {
    IsaLevel::kAvx512, "avx512-bf16",     mx::pack_mx_weights_avx512_bf16,
    decode_avx2,       prepare_w4a8_avx2, gemm_fp8,
    gemm_w4a4_avx512,  gemm_w4a8_avx512};

}  // namespace mx::mx_gemm_detail
