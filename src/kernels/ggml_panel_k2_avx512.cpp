// Row-interleaved panels of the 2-bit k-quants for the AVX-512 VNNI table (see
// ggml_panel_avx512.cpp): sixteen rows of Q2_K or Q3_K repacked at load so that each code
// register holds four consecutive weights of each row, decoded from their 2-bit fields (and
// Q3_K's third bits) with a shift and a mask a register.
#include "kernels/ggml_panel_avx512.h"

namespace mx::ggml_dot_detail {
namespace {

// Sub-block j's code registers from its two registers of 2-bit fields at q (ggml_panel_layout.h),
// with Q3_K's third bits from the register at hq moved to bit 2 (16-bit shifts: the bits they carry
// across a byte fall outside the bits kept).
template <bool kThird>
inline void codes2(const uint8_t* q, const uint8_t* hq, __m512i w[8]) {
  const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
  __m512i hv = _mm512_setzero_si512();
  if constexpr (kThird) hv = load512(hq);
  for (int h = 0; h < 2; ++h) {
    const __m512i l = load512(q + 64 * h);
    for (int u = 0; u < 4; ++u) {
      const __m512i f = u == 0 ? l : _mm512_srli_epi16(l, 2 * u);
      if constexpr (kThird) {
        // Register v's bit v to bit 2, then (a & 3) | b in one vpternlogd (0xEC).
        const int v = 4 * h + u;
        const __m512i b = v < 2 ? _mm512_slli_epi16(hv, 2 - v) : _mm512_srli_epi16(hv, v - 2);
        w[v] = _mm512_ternarylogic_epi32(f, _mm512_and_si512(b, m4), m3, 0xEC);
      } else {
        w[4 * h + u] = _mm512_and_si512(f, m3);
      }
    }
  }
}

// A sub-block's two group sums (each within int16: at most 16 x 4 x 127 in magnitude) as the
// int16 halves of each lane, what vpdpwssd multiplies against the groups' scale pairs: the
// scales then apply in exact integers, one conversion per super-block and activation row.
inline __m512i pair16(__m512i lo, __m512i hi) {
  return _mm512_mask_blend_epi16(0xAAAAAAAA, lo, _mm512_slli_epi32(hi, 16));
}

// Q3_K: codes 0..7 standing for -4..3, each group of 16's sum started at -4 times its
// activation sum; sum_g (sc_g - 32) dot_g in integers, times d and the row's dx.
template <int R>
struct Q3kPanel {
  static void run(const uint8_t* pan, const ActRowView* x, const int32_t* pre, int64_t b0,
                  int64_t nb, __m512* tot) {
    alignas(64) int32_t scp[8][16];
    const __m512i m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi32(3);
    for (int64_t bi = 0; bi < nb; ++bi) {
      const int64_t b = b0 + bi;
      const uint8_t* blk = pan + b * kQ3kPanelBlock;
      for (int j = 0; j < 8; ++j) {
        __m512i sc[2];
        for (int e = 0; e < 2; ++e) {
          const int g = 2 * j + e;
          const __m512i lo =
              _mm512_and_si512(_mm512_srli_epi32(plane(blk + 32 + 16 * (g / 2)), 4 * (g % 2)), m15);
          const __m512i hi =
              _mm512_and_si512(_mm512_srli_epi32(plane(blk + 160 + 16 * (g / 4)), 2 * (g % 4)), m3);
          sc[e] = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)),
                                   _mm512_set1_epi32(32));
        }
        _mm512_store_si512(scp[j], pair16(sc[0], sc[1]));
      }
      __m512i isum[R];
      for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        prefetch_part(blk, kQ3kPanelBlock, j);
        __m512i w[8];
        codes2<true>(blk + 224 + 128 * j, blk + 1248 + 64 * j, w);
        const __m512i sp = _mm512_load_si512(scp[j]);
        for (int r = 0; r < R; ++r) {
          const int32_t* pr = pre + (r * nb + bi) * 16 + 2 * j;
          __m512i da, db;
          sub_dots(w, x[r].codes + 256 * b + 32 * j, bcast32(pr), bcast32(pr + 1), &da, &db);
          isum[r] = _mm512_dpwssd_epi32(isum[r], pair16(da, db), sp);
        }
      }
      const __m512 d = _mm512_cvtph_ps(load256(blk));
      for (int r = 0; r < R; ++r) {
        tot[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(x[r].d[b])),
                                 _mm512_cvtepi32_ps(isum[r]), tot[r]);
      }
    }
  }
};

// Q2_K: per super-block, d sum_g sc_g dot_g - dmin sum_g m_g bsum_g, each sum in integers,
// times the row's dx.
template <int R>
struct Q2kPanel {
  static void run(const uint8_t* pan, const ActRowView* x, const int32_t* pre, int64_t b0,
                  int64_t nb, __m512* tot) {
    alignas(64) int32_t scp[8][16];
    alignas(64) int32_t mins[8][16];
    const __m512i m15 = _mm512_set1_epi32(15);
    for (int64_t bi = 0; bi < nb; ++bi) {
      const int64_t b = b0 + bi;
      const uint8_t* blk = pan + b * kQ2kPanelBlock;
      for (int p = 0; p < 8; ++p) {
        const __m512i s0 = plane(blk + 64 + 32 * p), s1 = plane(blk + 80 + 32 * p);
        _mm512_store_si512(scp[p], pair16(_mm512_and_si512(s0, m15), _mm512_and_si512(s1, m15)));
        _mm512_store_si512(mins[p], pair16(_mm512_srli_epi32(s0, 4), _mm512_srli_epi32(s1, 4)));
      }
      __m512i isum[R];
      for (int r = 0; r < R; ++r) isum[r] = _mm512_setzero_si512();
      for (int j = 0; j < 8; ++j) {
        prefetch_part(blk, kQ2kPanelBlock, j);
        __m512i w[8];
        codes2<false>(blk + 320 + 128 * j, nullptr, w);
        const __m512i sp = _mm512_load_si512(scp[j]);
        for (int r = 0; r < R; ++r) {
          __m512i da, db;
          sub_dots(w, x[r].codes + 256 * b + 32 * j, _mm512_setzero_si512(), _mm512_setzero_si512(),
                   &da, &db);
          isum[r] = _mm512_dpwssd_epi32(isum[r], pair16(da, db), sp);
        }
      }
      const __m512 d = _mm512_cvtph_ps(load256(blk)), dmin = _mm512_cvtph_ps(load256(blk + 32));
      for (int r = 0; r < R; ++r) {
        const int32_t* pr = pre + (r * nb + bi) * 8;
        __m512i ms = _mm512_setzero_si512();
        for (int p = 0; p < 8; ++p) {
          ms = _mm512_dpwssd_epi32(ms, _mm512_load_si512(mins[p]), bcast32(pr + p));
        }
        const __m512 v = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(isum[r]),
                                         _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(ms)));
        tot[r] = _mm512_fmadd_ps(_mm512_set1_ps(x[r].d[b]), v, tot[r]);
      }
    }
  }
};

}  // namespace

const PanelType* panel_type_k2(GgmlType t) {
  static const PanelType kQ3k{256,
                              kQ3kPanelBlock,
                              16,
                              GgmlActType::kQ8_K,
                              pre_q3_k,
                              repack_q3_k_panels,
                              fns_of<Q3kPanel>(kRowCounts)};
  static const PanelType kQ2k{256,
                              kQ2kPanelBlock,
                              8,
                              GgmlActType::kQ8_K,
                              pre_q2_k,
                              repack_q2_k_panels,
                              fns_of<Q2kPanel>(kRowCounts)};
  switch (t) {
    case GgmlType::kQ2_K:
      return &kQ2k;
    case GgmlType::kQ3_K:
      return &kQ3k;
    default:
      return nullptr;
  }
}

}  // namespace mx::ggml_dot_detail
