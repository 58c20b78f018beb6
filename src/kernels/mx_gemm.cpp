#include "kernels/mx_gemm.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/isa_table.h"

namespace mx {
namespace {

inline float pow2(int e) {
  // 2^e for e in [-149, 127] as an exact float.
  if (e >= -126) return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
  return std::bit_cast<float>(1u << (e + 149));
}

inline uint8_t code_at(ElemFormat f, const uint8_t* row, int64_t e) {
  return f == ElemFormat::kE2M1 ? (row[e >> 1] >> ((e & 1) * 4)) & 0xF : row[e];
}

const float* lut_of(ElemFormat f) {
  switch (f) {
    case ElemFormat::kE4M3:
      return e4m3_table();
    case ElemFormat::kE5M2:
      return e5m2_table();
    case ElemFormat::kE2M1:
      return e2m1_table();
  }
  return e4m3_table();
}

// f of mx_gemm.h: the FP32 exponent bias minus the format's.
int code_shift(ElemFormat f) { return f == ElemFormat::kE2M1 ? 126 : 120; }

// Where a panel block keeps column c's code at block-relative kk (mx_gemm.h): its byte, and
// for E2M1 the nibble's bit shift in it.
struct PanelSlot {
  int64_t byte;
  int shift;
};
inline PanelSlot panel_slot(bool fp4, int64_t c, int64_t kk) {
  const int64_t lane = c % 8, half = c / 8;
  if (fp4) {
    const int64_t t = 2 * (kk % 4) + half;
    return {(kk / 4) * 32 + lane * 4 + t / 2, static_cast<int>((t & 1) * 4)};
  }
  return {(kk / 2) * 32 + lane * 4 + 2 * (kk % 2) + half, 0};
}
inline uint8_t panel_code(bool fp4, const uint8_t* blk, int64_t c, int64_t kk) {
  const PanelSlot s = panel_slot(fp4, c, kk);
  return fp4 ? (blk[s.byte] >> s.shift) & 0xF : blk[s.byte];
}

}  // namespace

int64_t mx_decoded_stride(int64_t k) {
  const int64_t kp = (k + 31) / 32 * 32;
  return kp % 1024 == 0 ? kp + 32 : kp;
}

void mx_decode_activations(const MxMatrixView& a, float* af, float factor) {
  const int64_t k = a.k, nb = (k + 31) / 32, kp = mx_decoded_stride(k), nc = (k + 511) / 512;
  const float* lut = lut_of(a.format);
  for (int64_t i = 0; i < a.rows; ++i) {
    const uint8_t* row = a.codes + i * a.row_bytes;
    float* dst = af + i * kp;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t n = std::min<int64_t>(32, k - b * 32);
      float s = pow2(static_cast<int>(a.scales[i * nb + b]) - 127);
      if (a.chunk_scales != nullptr) s *= a.chunk_scales[i * nc + b / 16];
      s *= factor;
      for (int64_t j = 0; j < n; ++j) dst[b * 32 + j] = lut[code_at(a.format, row, b * 32 + j)] * s;
      for (int64_t j = n; j < 32; ++j) dst[b * 32 + j] = 0.0f;
    }
  }
}

void mx_prepare_fp4_activations(const MxMatrixView& a, int8_t* q, int32_t* sums, float* scales) {
  const int64_t k = a.k, nb = (k + 31) / 32, kp = mx_decoded_stride(k), nc = (k + 511) / 512;
  // Twice each E2M1 code's value, an integer: the bytes of whole blocks map through it two
  // codes at a time (low nibble first). Through the FP32 table and a conversion per value,
  // this preparation took 9% of the W4A4 prefill GEMM's samples.
  static constexpr int8_t kTwice[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int64_t i = 0; i < a.rows; ++i) {
    const uint8_t* row = a.codes + i * a.row_bytes;
    int8_t* dst = q + i * kp;
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t n = std::min<int64_t>(32, k - b * 32);
      int32_t sum = 0;
      int8_t* d = dst + b * 32;
      if (n == 32) {
        const uint8_t* src = row + b * 16;
        for (int j = 0; j < 16; ++j) {
          const int8_t lo = kTwice[src[j] & 0xF], hi = kTwice[src[j] >> 4];
          d[2 * j] = lo;
          d[2 * j + 1] = hi;
          sum += lo + hi;
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          d[j] = kTwice[code_at(ElemFormat::kE2M1, row, b * 32 + j)];
          sum += d[j];
        }
        for (int64_t j = n; j < 32; ++j) d[j] = 0;
      }
      sums[i * nb + b] = sum;
      float s = pow2(static_cast<int>(a.scales[i * nb + b]) - 129);
      if (a.chunk_scales != nullptr) s *= a.chunk_scales[i * nc + b / 16];
      scales[i * nb + b] = s;
    }
  }
}

int16_t mx_w4a8_activation_int(uint8_t code) {
  // Every E4M3 code's fixed-point value; NaN codes (never written by the quantizer) read 0.
  static const auto table = [] {
    std::array<int16_t, 256> t{};
    for (int c = 0; c < 256; ++c) {
      const float v = e4m3_table()[c] * static_cast<float>(1 << kMxW4a8FracBits);
      t[static_cast<size_t>(c)] = std::isfinite(v) ? static_cast<int16_t>(std::nearbyint(v)) : 0;
    }
    return t;
  }();
  return table[code];
}

void mx_prepare_fp8_activations_i16(const MxMatrixView& a, int16_t* q, float* scales) {
  const int64_t k = a.k, nb = (k + 31) / 32, kp = mx_decoded_stride(k);
  for (int64_t i = 0; i < a.rows; ++i) {
    const uint8_t* row = a.codes + i * a.row_bytes;
    int16_t* dst = q + i * kp;
    for (int64_t t = 0; t < kp; ++t) {
      // k0, k2, k1, k3 within each four.
      const int64_t src = (t & ~int64_t{3}) + ((t & 1) << 1) + ((t >> 1) & 1);
      dst[t] = src < k ? mx_w4a8_activation_int(row[src]) : 0;
    }
    for (int64_t b = 0; b < nb; ++b)
      scales[i * nb + b] = pow2(static_cast<int>(a.scales[i * nb + b]) - 127 - 14);
  }
}

int32_t mx_w4a8_weight_int(uint8_t code) {
  return static_cast<int32_t>(512.0f * e2m1_table()[code & 0xF]);
}

uint8_t mx_fp4_weight_offset_code(uint8_t code) {
  return static_cast<uint8_t>(static_cast<int>(2.0f * e2m1_table()[code & 0xF]) +
                              kMxFp4WeightOffset);
}

float mx_panel_code_unit(ElemFormat f) { return pow2(-code_shift(f)); }
float mx_panel_scale_unit(ElemFormat f) { return pow2(64 - code_shift(f)); }

namespace {

// Where each layout keeps column c's code at block-relative kk, [c * 32 + kk]: pack_mx_weights's
// panels (panel_slot) or AVX-512's (mx_gemm.h, pack_mx_weights_avx512).
using SlotTable = std::array<PanelSlot, kMxPanelCols * 32>;
enum class Layout { kAvx2, kAvx512, kAvx512Bf16 };
SlotTable make_slots(bool fp4, Layout layout) {
  SlotTable t{};
  for (int64_t c = 0; c < kMxPanelCols; ++c) {
    for (int64_t kk = 0; kk < 32; ++kk) {
      PanelSlot& s = t[static_cast<size_t>(c * 32 + kk)];
      const int64_t kt = kk % 4;
      if (layout == Layout::kAvx2) {
        s = panel_slot(fp4, c, kk);
      } else if (fp4) {
        s = {(kk / 8) * 64 + 4 * c + kk % 4, static_cast<int>((kk % 8) / 4 * 4)};
      } else if (layout == Layout::kAvx512) {
        s = {(kk / 4) * 64 + 4 * c + kt, 0};
      } else {
        s = {(kk / 4) * 64 + (c / 4) * 16 + 8 * (kt / 2) + 2 * (c % 4) + 1 - kt % 2, 0};
      }
    }
  }
  return t;
}
const PanelSlot* slots(bool fp4, Layout layout) {
  static const SlotTable tables[6] = {
      make_slots(false, Layout::kAvx2),       make_slots(true, Layout::kAvx2),
      make_slots(false, Layout::kAvx512),     make_slots(true, Layout::kAvx512),
      make_slots(false, Layout::kAvx512Bf16), make_slots(true, Layout::kAvx512Bf16)};
  // E2M1 codes sit alike in both AVX-512 layouts: one table, which pack_panels recognizes.
  if (fp4 && layout == Layout::kAvx512Bf16) layout = Layout::kAvx512;
  return tables[2 * static_cast<int>(layout) + (fp4 ? 1 : 0)].data();
}

// pack_mx_panels into the layout `slot` gives; the range of the stored scales into view's
// scale_min and scale_max.
float pack_panels(const MxMatrixView& w, uint8_t* codes, uint8_t* scales, float* chunk_scales,
                  const PanelSlot* slot, MxPanelView* view = nullptr) {
  const bool fp4 = w.format == ElemFormat::kE2M1;
  const int64_t n = w.rows, k = w.k, nb = (k + 31) / 32, nc = (k + 511) / 512;
  const int64_t panels = mx_panels(n), bb = mx_panel_block_bytes(w.format);
  const int f = code_shift(w.format) - 64;
  int max_s = 0;
  for (int64_t i = 0; i < n * nb; ++i) max_s = std::max<int>(max_s, w.scales[i]);
  // Dual level: a block's scale vector is 2^(s - 127 + f - g) times its chunk scale, which
  // must stay finite too.
  int chunk_exp = 0;
  if (w.chunk_scales != nullptr) {
    float cmax = 0.0f;
    for (int64_t i = 0; i < n * nc; ++i) cmax = std::max(cmax, std::fabs(w.chunk_scales[i]));
    if (cmax > 0.0f) chunk_exp = std::max(0, std::ilogb(cmax) + 1);
  }
  const int g = std::max(0, max_s + f + chunk_exp - 254);
  std::memset(codes, 0, static_cast<size_t>(panels * nb * bb));
  const bool wide_fp4 = slot == slots(true, Layout::kAvx512);
  const Layout fp8_layout = slot == slots(false, Layout::kAvx512)       ? Layout::kAvx512
                            : slot == slots(false, Layout::kAvx512Bf16) ? Layout::kAvx512Bf16
                                                                        : Layout::kAvx2;
  uint8_t lo = 255, hi = 0;
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = codes + (p * nb + b) * bb;
      uint8_t* sc = scales + (p * nb + b) * kMxPanelCols;
      const int64_t len = std::min<int64_t>(32, k - b * 32);
      for (int64_t c = 0; c < kMxPanelCols; ++c) {
        const int64_t col = p * kMxPanelCols + c;
        if (col >= n) {
          sc[c] = 127;
          continue;
        }
        // Scales below what an FP32 exponent holds after the shift by g read as zero.
        sc[c] = static_cast<uint8_t>(std::clamp(w.scales[col * nb + b] + f - g, 0, 254));
        lo = std::min(lo, sc[c]);
        hi = std::max(hi, sc[c]);
        const PanelSlot* cs = slot + c * 32;
        const uint8_t* row = w.codes + col * w.row_bytes;
        if (fp4 && len == 32 && wide_fp4) {
          // The AVX-512 tables' E2M1 slots four bytes at a time: byte t of group g (at 64g + 4c)
          // holds codes 8g + t and 8g + 4 + t, of the adjacent pairs in source bytes 4g .. 4g + 3.
          const uint8_t* src = row + b * 16;
          for (int64_t gr = 0; gr < 4; ++gr) {
            const uint8_t* s4 = src + 4 * gr;
            uint8_t* d = blk + 64 * gr + 4 * c;
            d[0] = static_cast<uint8_t>((s4[0] & 0xF) | (s4[2] & 0xF) << 4);
            d[1] = static_cast<uint8_t>((s4[0] >> 4) | (s4[2] & 0xF0));
            d[2] = static_cast<uint8_t>((s4[1] & 0xF) | (s4[3] & 0xF) << 4);
            d[3] = static_cast<uint8_t>((s4[1] >> 4) | (s4[3] & 0xF0));
          }
        } else if (fp4) {
          const uint8_t* src = row + b * 16;
          for (int64_t kk = 0; kk < len; ++kk) {
            const auto code = static_cast<uint8_t>((src[kk >> 1] >> ((kk & 1) * 4)) & 0xF);
            blk[cs[kk].byte] |= static_cast<uint8_t>(code << cs[kk].shift);
          }
        } else if (len == 32 && fp8_layout != Layout::kAvx2) {
          // The AVX-512 tables' E4M3 slots four codes at a time (make_slots): k = 4j .. 4j + 3
          // at 64j + 4c in order, or, for the BF16-pair layout, as the swapped pairs (4j + 1,
          // 4j) and (4j + 3, 4j + 2) at 64j + 16(c / 4) + 2(c % 4) and 8 bytes on.
          const uint8_t* src = row + b * 32;
          for (int64_t j = 0; j < 8; ++j) {
            const uint8_t* s4 = src + 4 * j;
            if (fp8_layout == Layout::kAvx512) {
              std::memcpy(blk + 64 * j + 4 * c, s4, 4);
            } else {
              uint8_t* d = blk + 64 * j + 16 * (c / 4) + 2 * (c % 4);
              d[0] = s4[1];
              d[1] = s4[0];
              d[8] = s4[3];
              d[9] = s4[2];
            }
          }
        } else {
          const uint8_t* src = row + b * 32;
          for (int64_t kk = 0; kk < len; ++kk) blk[cs[kk].byte] = src[kk];
        }
      }
    }
    if (chunk_scales != nullptr && w.chunk_scales != nullptr) {
      for (int64_t c = 0; c < nc; ++c) {
        for (int64_t j = 0; j < kMxPanelCols; ++j) {
          const int64_t col = p * kMxPanelCols + j;
          chunk_scales[(p * nc + c) * kMxPanelCols + j] =
              col < n ? w.chunk_scales[col * nc + c] : 0;
        }
      }
    }
  }
  if (view != nullptr && lo <= hi) {
    view->scale_min = lo;
    view->scale_max = hi;
  }
  return pow2(g);
}

MxPanelWeights pack_weights(const MxMatrixView& w, Layout layout) {
  MxPanelWeights p;
  const bool dual = w.chunk_scales != nullptr;
  p.codes.resize(static_cast<size_t>(mx_panel_code_bytes(w.format, w.rows, w.k)));
  p.scales.resize(static_cast<size_t>(mx_panel_scale_bytes(w.rows, w.k)));
  if (dual) p.chunk_scales.resize(static_cast<size_t>(mx_panel_chunk_floats(w.rows, w.k)));
  float* chunks = dual ? p.chunk_scales.data() : nullptr;
  p.view = {w.format, p.codes.data(), p.scales.data(), chunks, w.rows, w.k, 1.0f};
  p.view.post = pack_panels(w, p.codes.data(), p.scales.data(), chunks,
                            slots(w.format == ElemFormat::kE2M1, layout), &p.view);
  return p;
}

}  // namespace

float pack_mx_panels(const MxMatrixView& w, uint8_t* codes, uint8_t* scales, float* chunk_scales) {
  return pack_panels(w, codes, scales, chunk_scales,
                     slots(w.format == ElemFormat::kE2M1, Layout::kAvx2));
}

MxPanelWeights pack_mx_weights(const MxMatrixView& w) { return pack_weights(w, Layout::kAvx2); }

MxPanelWeights pack_mx_weights_avx512(const MxMatrixView& w) {
  return pack_weights(w, Layout::kAvx512);
}

MxPanelWeights pack_mx_weights_avx512_bf16(const MxMatrixView& w) {
  return pack_weights(w, Layout::kAvx512Bf16);
}

namespace mx_gemm_detail {
namespace {

// The weight of panel column c at block-relative kk, unscaled (value times 2^-f).
inline float raw_code(const MxPanelView& w, const uint8_t* blk, int64_t c, int64_t kk,
                      const float* lut, float unit) {
  return lut[panel_code(w.format == ElemFormat::kE2M1, blk, c, kk)] * unit;
}

// The same operations as the vector kernels, one output at a time: one FMA chain per block,
// then the block's sum times its scale added to the total.
void mx_gemm_scalar(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32, nc = (w.k + 511) / 512, bb = mx_panel_block_bytes(w.format);
  const float* lut = lut_of(w.format);
  const float unit = mx_panel_code_unit(w.format);
  for (int64_t col = n_begin; col < n_end; ++col) {
    const int64_t p = col / kMxPanelCols, c = col % kMxPanelCols;
    for (int64_t i = 0; i < a.m; ++i) {
      const float* x = a.x + i * a.ldx;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = w.codes + (p * nb + b) * bb;
        float sum = 0.0f;
        for (int64_t kk = 0; kk < 32; ++kk)
          sum = __builtin_fmaf(x[b * 32 + kk], raw_code(w, blk, c, kk, lut, unit), sum);
        float sv = std::bit_cast<float>(
            static_cast<uint32_t>(w.scales[(p * nb + b) * kMxPanelCols + c]) << 23);
        if (w.chunk_scales != nullptr) sv *= w.chunk_scales[(p * nc + b / 16) * kMxPanelCols + c];
        acc = __builtin_fmaf(sum, sv, acc);
      }
      a.y[i * a.ldy + col - a.y_col0] = acc * w.post;
    }
  }
}

// The integer kernels' reference, their operations one output at a time: per block the exact
// integer dot that block_dot(blk, c, row, b) gives, scaled by (stored scale * 2^(64 - f)) *
// the row's activation scale and added to the total.
template <typename BlockDot>
void int_gemm_scalar(const MxGemmArgs& a, int64_t n_begin, int64_t n_end, BlockDot block_dot) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32, nc = (w.k + 511) / 512, bb = mx_panel_block_bytes(w.format);
  const float unit = mx_panel_scale_unit(w.format);
  for (int64_t col = n_begin; col < n_end; ++col) {
    const int64_t p = col / kMxPanelCols, c = col % kMxPanelCols;
    for (int64_t i = 0; i < a.m; ++i) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const int32_t dot = block_dot(w.codes + (p * nb + b) * bb, c, i, b);
        float sv = std::bit_cast<float>(
            static_cast<uint32_t>(w.scales[(p * nb + b) * kMxPanelCols + c]) << 23);
        if (w.chunk_scales != nullptr) sv *= w.chunk_scales[(p * nc + b / 16) * kMxPanelCols + c];
        const float scale = (sv * unit) * a.xscale[i * nb + b];
        acc = __builtin_fmaf(static_cast<float>(dot), scale, acc);
      }
      a.y[i * a.ldy + col - a.y_col0] = acc * w.post;
    }
  }
}

// W4A4: 2w + 12 times the int8 activations, less the offset's share.
void mx_gemm_w4a4_scalar(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t nb = (a.w->k + 31) / 32;
  int_gemm_scalar(a, n_begin, n_end, [&](const uint8_t* blk, int64_t c, int64_t i, int64_t b) {
    const int8_t* x = a.xq + i * a.ldx + b * 32;
    int32_t dot = 0;
    for (int64_t kk = 0; kk < 32; ++kk)
      dot += mx_fp4_weight_offset_code(panel_code(true, blk, c, kk)) * x[kk];
    return dot - kMxFp4WeightOffset * a.xsum[i * nb + b];
  });
}

// The scalar kernel reads mx_prepare_fp8_activations_i16's layout alone.
void prepare_w4a8_scalar(const MxMatrixView& a, int16_t* q, int8_t*, int32_t*, float* scales) {
  mx_prepare_fp8_activations_i16(a, q, scales);
}

// W4A8: 512w times the 14-bit activations (mx_prepare_fp8_activations_i16's order).
void mx_gemm_w4a8_scalar(const MxGemmArgs& a, int64_t n_begin, int64_t n_end) {
  int_gemm_scalar(a, n_begin, n_end, [&](const uint8_t* blk, int64_t c, int64_t i, int64_t b) {
    const int16_t* x = a.xh + i * a.ldx + b * 32;
    int32_t dot = 0;
    for (int64_t kk = 0; kk < 32; ++kk) {
      const int64_t at = (kk & ~int64_t{3}) + ((kk & 1) << 1) + ((kk >> 1) & 1);
      dot += mx_w4a8_weight_int(panel_code(true, blk, c, kk)) * x[at];
    }
    return dot;
  });
}

}  // namespace

bool mx_one_row_scale_exps(const MxGemmArgs& a, int shift, int32_t* exp, int64_t max_blocks) {
  const MxPanelView& w = *a.w;
  const int64_t nb = (w.k + 31) / 32;
  const int unit = std::ilogb(mx_panel_scale_unit(w.format));
  if (a.m != 1 || w.chunk_scales != nullptr || nb > max_blocks || w.scale_min + unit < 1) {
    return false;
  }
  for (int64_t b = 0; b < nb; ++b) {
    const auto bits = std::bit_cast<uint32_t>(a.xscale[b]);
    const auto field = static_cast<int32_t>(bits >> 23);
    if ((bits & 0x807FFFFFu) != 0 || field == 0 || field == 255) return false;
    exp[b] = field - 127 + unit + shift;
    if (w.scale_min + exp[b] < 1 || w.scale_max + exp[b] > 254) return false;
  }
  return true;
}

const MxGemmKernels kScalarMxGemm = {
    IsaLevel::kScalar,   "scalar",       pack_mx_weights,     mx_decode_activations,
    prepare_w4a8_scalar, mx_gemm_scalar, mx_gemm_w4a4_scalar, mx_gemm_w4a8_scalar};
}  // namespace mx_gemm_detail

namespace {
// At AVX-512, the variant whose E4M3 GEMM runs on vdpbf16ps where that instruction keeps the
// FMA's rate (cpu_features.h).
const IsaTable<MxGemmKernels>& kernel_table() {
  static const IsaTable<MxGemmKernels> table{
      &mx_gemm_detail::kScalarMxGemm, &mx_gemm_detail::kAvx2MxGemm,
      cpu_features().bf16_dot_at_fma_rate ? &mx_gemm_detail::kAvx512Bf16MxGemm
                                          : &mx_gemm_detail::kAvx512MxGemm,
      &mx_gemm_detail::kAmxMxGemm};
  return table;
}
}  // namespace

const MxGemmKernels* mx_gemm_kernels_for(IsaLevel level) { return kernel_table().at(level); }

const MxGemmKernels& mx_gemm_kernels() {
  static const MxGemmKernels& k = kernel_table().select();
  return k;
}

std::vector<const MxGemmKernels*> mx_gemm_kernel_variants() {
  std::vector<const MxGemmKernels*> v;
  for (IsaLevel l : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAmx}) {
    if (!isa_supported(l)) continue;
    if (l == IsaLevel::kAvx512) {
      v.push_back(&mx_gemm_detail::kAvx512MxGemm);
      v.push_back(&mx_gemm_detail::kAvx512Bf16MxGemm);
    } else if (const MxGemmKernels* t = kernel_table().at(l)) {
      v.push_back(t);
    }
  }
  return v;
}

}  // namespace mx
