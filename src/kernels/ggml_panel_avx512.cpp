// Row-interleaved panels for the AVX-512 VNNI table: sixteen weight rows of a type repacked at
// load so that one 512-bit register holds four consecutive weights of each of the sixteen rows.
// One vpdpbusd then multiplies a broadcast group of four activation codes into all sixteen output
// columns, so no horizontal sum is ever taken and the per-block scales scale sixteen columns a
// vector operation: against the row kernels (one register per 64 weights of one row, one FP32
// conversion and FMA per 64 products), a 32-value sub-block costs eight vpdpbusd, one conversion
// and one FMA per activation row for 512 products.
//
// Q4_K panel, per super-block (2304 bytes, sixteen rows' 144 each; rows past n are zero):
//   [0, 32)      d of row r at 2r (FP16)           [32, 64)  dmin of row r at 32 + 2r
//   [64, 192)    sub-block j, row r at 64 + 16j + r: low four bits of scale | of min << 4
//   [192, 256)   sub-blocks 2p and 2p + 1, row r at 192 + 16p + r: the high two bits of scale
//                2p (bits 0-1), min 2p (2-3), scale 2p + 1 (4-5), min 2p + 1 (6-7)
//   [256, 2304)  sub-block j's 256 bytes at 256 + 256j, in four registers u: bytes 4r..4r + 3 of
//                register u hold weights 32j + 4u + t (low nibble) and 32j + 16 + 4u + t (high
//                nibble) of row r, t = 0..3.
// Q5_K, IQ4_XS and Q6_K panels keep the same nibble planes, Q8_0 panels its codes four to a lane;
// their layouts are at their repack functions. Signed weights are stored offset to unsigned
// bytes (w + 128, Q6_K's codes as stored), and the offset times each block's activation sum
// starts the block's integer sum, negated: exact, with no FP32 correction term.
#include "kernels/ggml_panel_avx512.h"

namespace mx::ggml_dot_detail {
namespace {

// int32s of per-block activation terms one pass keeps on the stack (16 KiB): k is walked in
// chunks of blocks whose terms fit.
constexpr int64_t kPreInts = 4096;

// ---- Kernels: R activation rows against one panel over blocks [b0, b0 + nb) ----

// Q4_K and Q5_K: per super-block, sum_j d sc_j dot_j - dmin sum_j m_j bsum_j, times the row's
// dx.
template <bool kFive, int R>
struct K4Panel {
  static void run(const uint8_t* pan, const ActRowView* x, const int32_t* pre, int64_t b0,
                  int64_t nb, __m512* tot) {
    constexpr int64_t kBytes = kFive ? kQ5kPanelBlock : kQ4kPanelBlock;
    alignas(64) float dsc[8][16];
    alignas(64) int32_t mins[4][16];
    const __m512i m4 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
    for (int64_t bi = 0; bi < nb; ++bi) {
      const int64_t b = b0 + bi;
      const uint8_t* blk = pan + b * kBytes;
      const __m512 d = _mm512_cvtph_ps(load256(blk)), dmin = _mm512_cvtph_ps(load256(blk + 32));
      __m512i mv[8];
      for (int j = 0; j < 8; ++j) {
        const __m512i lo = plane(blk + 64 + 16 * j);
        const __m512i hi = _mm512_srli_epi32(plane(blk + 192 + 16 * (j / 2)), 4 * (j & 1));
        const __m512i sc = _mm512_or_si512(_mm512_and_si512(lo, m4),
                                           _mm512_slli_epi32(_mm512_and_si512(hi, m3), 4));
        mv[j] =
            _mm512_or_si512(_mm512_srli_epi32(lo, 4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hi, 2), m3), 4));
        _mm512_store_ps(dsc[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
      }
      for (int p = 0; p < 4; ++p) {
        _mm512_store_si512(mins[p],
                           _mm512_or_si512(mv[2 * p], _mm512_slli_epi32(mv[2 * p + 1], 16)));
      }
      // Zeroed and summed from the first sub-block on: for Q5_K, 275-282 -> 296-301 GOP/s
      // against a first product that needs no sum (mx_bench, 8-128 rows, two alternations).
      __m512 acc[R];
      for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
      for (int j = 0; j < 8; ++j) {
        prefetch_part(blk, kBytes, j);
        __m512i w[8];
        if constexpr (kFive) {
          nibbles5(blk + 256 + 256 * j, blk + kQ4kPanelBlock + 64 * j, w);
        } else {
          nibbles(blk + 256 + 256 * j, w);
        }
        const __m512 scale = _mm512_load_ps(dsc[j]);
        for (int r = 0; r < R; ++r) {
          const __m512i dot = sub_dot(w, x[r].codes + 256 * b + 32 * j, _mm512_setzero_si512());
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc[r]);
        }
      }
      for (int r = 0; r < R; ++r) {
        const int32_t* pr = pre + (r * nb + bi) * 4;
        __m512i ms = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) {
          ms = _mm512_dpwssd_epi32(ms, _mm512_load_si512(mins[p]), bcast32(pr + p));
        }
        acc[r] = _mm512_fnmadd_ps(dmin, _mm512_cvtepi32_ps(ms), acc[r]);
        tot[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r].d[b]), acc[r], tot[r]);
      }
    }
  }
};

template <int R>
using Q4kPanel = K4Panel<false, R>;
template <int R>
using Q5kPanel = K4Panel<true, R>;

// IQ4_XS: the grid's values offset by 128 to unsigned bytes; the biased scales in FP32 with d.
template <int R>
struct Iq4XsPanel {
  static void run(const uint8_t* pan, const ActRowView* x, const int32_t* pre, int64_t b0,
                  int64_t nb, __m512* tot) {
    alignas(64) float dsc[8][16];
    const __m512i grid = _mm512_xor_si512(
        _mm512_maskz_broadcast_i32x4(0xFFFF, load128(kGgmlIq4Values)), _mm512_set1_epi8(-128));
    const __m512i m4 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
    for (int64_t bi = 0; bi < nb; ++bi) {
      const int64_t b = b0 + bi;
      const uint8_t* blk = pan + b * kIq4PanelBlock;
      const __m512 d = _mm512_cvtph_ps(load256(blk));
      for (int j = 0; j < 8; ++j) {
        const __m512i lo =
            _mm512_and_si512(_mm512_srli_epi32(plane(blk + 32 + 16 * (j / 2)), 4 * (j % 2)), m4);
        const __m512i hi =
            _mm512_and_si512(_mm512_srli_epi32(plane(blk + 96 + 16 * (j / 4)), 2 * (j % 4)), m3);
        const __m512i sc =
            _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
        _mm512_store_ps(dsc[j], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
      }
      __m512 acc[R];
      for (int j = 0; j < 8; ++j) {
        prefetch_part(blk, kIq4PanelBlock, j);
        __m512i w[8];
        nibbles(blk + 128 + 256 * j, w);
        for (int u = 0; u < 8; ++u) w[u] = _mm512_shuffle_epi8(grid, w[u]);
        const __m512 scale = _mm512_load_ps(dsc[j]);
        for (int r = 0; r < R; ++r) {
          const __m512i start = bcast32(pre + (r * nb + bi) * 8 + j);
          scaled_acc(j, sub_dot(w, x[r].codes + 256 * b + 32 * j, start), scale, &acc[r]);
        }
      }
      for (int r = 0; r < R; ++r) {
        tot[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r].d[b]), acc[r], tot[r]);
      }
    }
  }
};

// Q6_K: the six-bit codes as unsigned bytes (low nibble | high bits << 4), each group of 16's
// sum started at -32 times its activation sum and scaled by d times its int8 scale.
template <int R>
struct Q6kPanel {
  static void run(const uint8_t* pan, const ActRowView* x, const int32_t* pre, int64_t b0,
                  int64_t nb, __m512* tot) {
    alignas(64) float dsc[16][16];
    const __m512i m30 = _mm512_set1_epi8(0x30), m4 = _mm512_set1_epi8(0x0F);
    for (int64_t bi = 0; bi < nb; ++bi) {
      const int64_t b = b0 + bi;
      const uint8_t* blk = pan + b * kQ6kPanelBlock;
      const __m512 d = _mm512_cvtph_ps(load256(blk));
      for (int g = 0; g < 16; ++g) {
        const __m512i sc = _mm512_cvtepi8_epi32(load128(blk + 32 + 16 * g));
        _mm512_store_ps(dsc[g], _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc)));
      }
      __m512 acc[R];
      for (int j = 0; j < 8; ++j) {
        prefetch_part(blk, kQ6kPanelBlock, j);
        // Nibble registers unmasked: one vpternlogd per register keeps the low nibble and ORs
        // the high bits in, (a & 0x0F) | b (0xEC), where a mask and an OR would take two.
        __m512i w[8];
        for (int u = 0; u < 4; ++u) {
          w[u] = load512(blk + 288 + 256 * j + 64 * u);
          w[u + 4] = _mm512_srli_epi16(w[u], 4);
        }
        for (int h = 0; h < 2; ++h) {
          const __m512i hv = load512(blk + 2336 + 128 * j + 64 * h);
          const __m512i f[4] = {_mm512_slli_epi16(hv, 4), _mm512_slli_epi16(hv, 2), hv,
                                _mm512_srli_epi16(hv, 2)};
          for (int u = 0; u < 4; ++u) {
            w[4 * h + u] =
                _mm512_ternarylogic_epi32(w[4 * h + u], _mm512_and_si512(f[u], m30), m4, 0xEC);
          }
        }
        const __m512 sa = _mm512_load_ps(dsc[2 * j]), sb = _mm512_load_ps(dsc[2 * j + 1]);
        for (int r = 0; r < R; ++r) {
          const int32_t* pr = pre + (r * nb + bi) * 16 + 2 * j;
          __m512i da, db;
          sub_dots(w, x[r].codes + 256 * b + 32 * j, bcast32(pr), bcast32(pr + 1), &da, &db);
          scaled_acc(j, da, sa, &acc[r]);
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(db), sb, acc[r]);
        }
      }
      for (int r = 0; r < R; ++r) {
        tot[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r].d[b]), acc[r], tot[r]);
      }
    }
  }
};

// Q8_0: per block of 32, the offset codes' sum started at -128 times the activation sum, times
// the rows' d and the activation's.
template <int R>
struct Q80Panel {
  static void run(const uint8_t* pan, const ActRowView* x, const int32_t* pre, int64_t b0,
                  int64_t nb, __m512* tot) {
    for (int64_t bi = 0; bi < nb; ++bi) {
      const int64_t b = b0 + bi;
      const uint8_t* blk = pan + b * kQ8PanelBlock;
      const __m512 dw = _mm512_cvtph_ps(load256(blk));
      __m512i w[8];
      for (int v = 0; v < 8; ++v) w[v] = load512(blk + 32 + 64 * v);
      for (int r = 0; r < R; ++r) {
        const __m512i dot = sub_dot(w, x[r].codes + 32 * b, bcast32(pre + r * nb + bi));
        tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                 _mm512_mul_ps(dw, _mm512_set1_ps(x[r].d[b])), tot[r]);
      }
    }
  }
};

const PanelType* panel_type(GgmlType t) {
  static const PanelType kQ4k{256,
                              kQ4kPanelBlock,
                              4,
                              GgmlActType::kQ8_K,
                              pre_q4_k,
                              repack_q4_k_panels,
                              fns_of<Q4kPanel>(kRowCounts)};
  static const PanelType kQ5k{256,
                              kQ5kPanelBlock,
                              4,
                              GgmlActType::kQ8_K,
                              pre_q4_k,
                              repack_q5_k_panels,
                              fns_of<Q5kPanel>(kRowCounts)};
  static const PanelType kIq4Xs{256,
                                kIq4PanelBlock,
                                8,
                                GgmlActType::kQ8_K,
                                pre_iq4_xs,
                                repack_iq4_xs_panels,
                                fns_of<Iq4XsPanel>(kRowCounts)};
  static const PanelType kQ6k{256,
                              kQ6kPanelBlock,
                              16,
                              GgmlActType::kQ8_K,
                              pre_q6_k,
                              repack_q6_k_panels,
                              fns_of<Q6kPanel>(kRowCounts)};
  static const PanelType kQ80{32,
                              kQ8PanelBlock,
                              1,
                              GgmlActType::kQ8_0,
                              pre_q8_0,
                              repack_q8_0_panels,
                              fns_of<Q80Panel>(kRowCounts)};
  switch (t) {
    case GgmlType::kQ4_K:
      return &kQ4k;
    case GgmlType::kQ5_K:
      return &kQ5k;
    case GgmlType::kIQ4_XS:
      return &kIq4Xs;
    case GgmlType::kQ6_K:
      return &kQ6k;
    case GgmlType::kQ8_0:
      return &kQ80;
    default:
      break;
  }
  if (const PanelType* k2 = panel_type_k2(t)) return k2;
  return panel_type_b32(t);
}

}  // namespace

int panel_rows_avx512(GgmlType t) { return panel_type(t) != nullptr ? 16 : 0; }

void repack_avx512(GgmlType t, const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                   uint8_t* out) {
  panel_type(t)->repack(rows, row_bytes, n, k, out);
}

// Columns [n_begin, n_end) of y in blocks of panels that together stay in L2 (about 256 KiB),
// each block swept by eight activation rows at a time, so the weights stream from memory once
// and the activations once per block; a panel only partly inside the columns is computed whole
// and stored masked. k is walked in chunks of blocks whose activation terms fit the stack, the
// columns accumulating in y after the first.
void gemm_panels_avx512(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end) {
  constexpr int kR = kMaxRows512;
  const PanelType& pt = *panel_type(a.type);
  const int64_t nblk = a.k / pt.values, chunk = kPreInts / (kR * pt.per);
  const int64_t panel_bytes = nblk * pt.bytes;
  const int64_t block_cols = 16 * std::max<int64_t>(1, (256 << 10) / panel_bytes);
  alignas(64) int32_t pre[kPreInts];
  for (int64_t nb0 = n_begin / 16 * 16; nb0 < n_end; nb0 += block_cols) {
    const int64_t nb1 = std::min(n_end, nb0 + block_cols);
    for (int64_t i0 = 0; i0 < a.m; i0 += kR) {
      const int rows = static_cast<int>(std::min<int64_t>(kR, a.m - i0));
      ActRowView x[kR];
      for (int r = 0; r < rows; ++r) {
        x[r] = act_row_view(pt.act, a.xq + (i0 + r) * a.xq_stride, a.k);
      }
      for (int64_t b0 = 0; b0 < nblk; b0 += chunk) {
        const int64_t nb = std::min(chunk, nblk - b0);
        pt.pre(x, rows, b0, nb, pre);
        for (int64_t n0 = nb0; n0 < nb1; n0 += 16) {
          const int64_t lo = std::max<int64_t>(n_begin - n0, 0);
          const int64_t hi = std::min<int64_t>(nb1 - n0, 16);
          const auto mask = static_cast<__mmask16>((0xFFFFu >> (16 - hi)) & (0xFFFFu << lo));
          float* y0 = a.y + i0 * a.ldy + n0;
          __m512 tot[kR];
          for (int r = 0; r < rows; ++r) {
            tot[r] = b0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask, y0 + r * a.ldy);
          }
          pt.fns.f[rows - 1](a.w + n0 / 16 * panel_bytes, x, pre, b0, nb, tot);
          for (int r = 0; r < rows; ++r) _mm512_mask_storeu_ps(y0 + r * a.ldy, mask, tot[r]);
        }
      }
    }
  }
}

}  // namespace mx::ggml_dot_detail
