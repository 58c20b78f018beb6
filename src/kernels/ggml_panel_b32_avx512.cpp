// Row-interleaved panels of the 32-value nibble types for the AVX-512 VNNI table (see
// ggml_panel_avx512.cpp): sixteen rows of Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL repacked at load
// (layout and repack in ggml_panel_layout.h).
// Offsets run as integer sums started at the offset times the block's activation sum (Q4_0 -8,
// Q5_0 -16, IQ4_NL's grid stored plus 128 and -128); Q4_1 and Q5_1 add m times the activation
// block's d * sum (Q8_1's s).
#include "kernels/ggml_panel_avx512.h"

namespace mx::ggml_dot_detail {
namespace {

template <const B32Kind& K, int R>
struct B32Panel {
  static void run(const uint8_t* pan, const ActRowView* x, const int32_t* pre, int64_t b0,
                  int64_t nb, __m512* tot) {
    constexpr int64_t kBytes = panel_block(K), kCodes = codes_at(K);
    for (int64_t bi = 0; bi < nb; ++bi) {
      const int64_t b = b0 + bi;
      const uint8_t* blk = pan + b * kBytes;
      const __m512 dw = _mm512_cvtph_ps(load256(blk));
      const __m512 mw = K.has_min ? _mm512_cvtph_ps(load256(blk + 32)) : _mm512_setzero_ps();
      __m512i w[8];
      if constexpr (K.qh_at >= 0) {
        nibbles5(blk + kCodes, blk + kCodes + 256, w);
      } else {
        nibbles(blk + kCodes, w);
      }
      if constexpr (K.grid) {
        const __m512i grid = _mm512_xor_si512(
            _mm512_maskz_broadcast_i32x4(0xFFFF, load128(kGgmlIq4Values)), _mm512_set1_epi8(-128));
        for (int u = 0; u < 8; ++u) w[u] = _mm512_shuffle_epi8(grid, w[u]);
      }
      for (int r = 0; r < R; ++r) {
        const __m512i dot = sub_dot(w, x[r].codes + 32 * b, bcast32(pre + r * nb + bi));
        tot[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                                 _mm512_mul_ps(dw, _mm512_set1_ps(x[r].d[b])), tot[r]);
        if constexpr (K.has_min) {
          tot[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x[r].s[b]), tot[r]);
        }
      }
    }
  }
};

template <const B32Kind& K>
struct B32Of {
  template <int R>
  using Panel = B32Panel<K, R>;
  static PanelType type() {
    return {32,
            panel_block(K),
            1,
            GgmlActType::kQ8_0,
            pre_blocks32<K.offset>,
            repack_b32<K>,
            fns_of<Panel>(kRowCounts)};
  }
};

}  // namespace

const PanelType* panel_type_b32(GgmlType t) {
  static const PanelType kTypes[] = {B32Of<kQ40>::type(), B32Of<kQ41>::type(), B32Of<kQ50>::type(),
                                     B32Of<kQ51>::type(), B32Of<kIq4Nl>::type()};
  switch (t) {
    case GgmlType::kQ4_0:
      return &kTypes[0];
    case GgmlType::kQ4_1:
      return &kTypes[1];
    case GgmlType::kQ5_0:
      return &kTypes[2];
    case GgmlType::kQ5_1:
      return &kTypes[3];
    case GgmlType::kIQ4_NL:
      return &kTypes[4];
    default:
      return nullptr;
  }
}

}  // namespace mx::ggml_dot_detail
