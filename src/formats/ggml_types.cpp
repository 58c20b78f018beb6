// ggml's type table and the scalar reference dequantizers, written from the block layouts of
// ggml-common.h. Each reference performs the FP32 operations of ggml's dequantize_row_* in
// the same order (products rounded before they are added), so the results are ggml's to_float
// bit for bit.
#include "formats/ggml_types.h"

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

#include "core/isa_table.h"
#include "formats/half.h"
#include "formats/mx_layout.h"

namespace mx {
namespace ggml_detail {
namespace {

// ggml rounds each product to FP32 before adding: a fused multiply-add would not. Shared code
// is built for the baseline ISA (no FMA), but GCC contracts a*b+c whenever FMA is enabled
// (-ffp-contract=fast is its C++ default), so a build for a newer baseline is fenced here.
inline float unfused(float x) {
#if defined(__FMA__)
  __asm__("" : "+x"(x));
#endif
  return x;
}

template <typename Block>
inline Block load(const uint8_t* blocks, int64_t i) {
  Block b;
  std::memcpy(&b, blocks + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return b;
}

// d = 2^(e - 128), the E8M0 scale halved to match the doubled E2M1 table; e = 0 and 1 give
// the FP32 subnormals 2^-128 and 2^-127.
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

// Twice the E2M1 values, indexed by the 4-bit code (sign in bit 3).
constexpr int8_t kMxfp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

}  // namespace

// The 16 six-bit Q3_K scales (unbiased: -32..31). Bytes 0-7 hold the low four bits (scales
// 0-7 in the low nibbles, 8-15 in the high nibbles); bytes 8-11 the top two bits, scale j in
// byte 8 + j % 4 at bit 2 * (j / 4).
void q3_k_scales(const uint8_t s[12], int scales[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? s[j] & 0xF : s[j - 8] >> 4;
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = (low | (high << 4)) - 32;
  }
}

// Q2_K and Q3_K share the walk over a super-block: two halves of 128 values, each read four
// times (2-bit fields at shift 0, 2, 4, 6) from 32 bytes, 16 values per scale.
int q2_field(const uint8_t* qs, int i) {
  const int half = i / 128, pass = (i % 128) / 32, l = i % 32;
  return (qs[half * 32 + l] >> (2 * pass)) & 3;
}

void unpack_k4_scales(const uint8_t s[12], uint8_t sc[8], uint8_t m[8]) {
  // Sub-blocks 0-3: six bits in bytes 0-3 (scales) and 4-7 (mins). Sub-blocks 4-7: low four
  // bits in the nibbles of bytes 8-11, top two bits in the spare bits 6-7 of bytes 0-7.
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 63;
    m[j] = s[j + 4] & 63;
    sc[j + 4] = static_cast<uint8_t>((s[j + 8] & 0xF) | ((s[j] >> 6) << 4));
    m[j + 4] = static_cast<uint8_t>((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

void ref_f32(const uint8_t* blocks, float* out, int64_t n) {
  std::memcpy(out, blocks, static_cast<size_t>(n) * sizeof(float));
}

void ref_f16(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, blocks + 2 * i, 2);
    out[i] = fp16_to_float(h);
  }
}

void ref_bf16(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, blocks + 2 * i, 2);
    out[i] = bf16_to_float(h);
  }
}

void ref_q4_0(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const auto blk = load<GgmlBlockQ4_0>(blocks, b);
    const float d = fp16_to_float(blk.d);
    float* y = out + b * kGgmlQK;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>((blk.qs[j] & 0xF) - 8) * d;
      y[j + 16] = static_cast<float>((blk.qs[j] >> 4) - 8) * d;
    }
  }
}

void ref_q4_1(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const auto blk = load<GgmlBlockQ4_1>(blocks, b);
    const float d = fp16_to_float(blk.d);
    const float m = fp16_to_float(blk.m);
    float* y = out + b * kGgmlQK;
    for (int j = 0; j < 16; ++j) {
      y[j] = unfused(static_cast<float>(blk.qs[j] & 0xF) * d) + m;
      y[j + 16] = unfused(static_cast<float>(blk.qs[j] >> 4) * d) + m;
    }
  }
}

void ref_q5_0(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const auto blk = load<GgmlBlockQ5_0>(blocks, b);
    const float d = fp16_to_float(blk.d);
    uint32_t qh;
    std::memcpy(&qh, blk.qh, 4);
    float* y = out + b * kGgmlQK;
    for (int j = 0; j < 16; ++j) {
      const int q0 = (blk.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int q1 = (blk.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = static_cast<float>(q0 - 16) * d;
      y[j + 16] = static_cast<float>(q1 - 16) * d;
    }
  }
}

void ref_q5_1(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const auto blk = load<GgmlBlockQ5_1>(blocks, b);
    const float d = fp16_to_float(blk.d);
    const float m = fp16_to_float(blk.m);
    uint32_t qh;
    std::memcpy(&qh, blk.qh, 4);
    float* y = out + b * kGgmlQK;
    for (int j = 0; j < 16; ++j) {
      const int q0 = (blk.qs[j] & 0xF) | static_cast<int>(((qh >> j) & 1) << 4);
      const int q1 = (blk.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      y[j] = unfused(static_cast<float>(q0) * d) + m;
      y[j + 16] = unfused(static_cast<float>(q1) * d) + m;
    }
  }
}

void ref_q8_0(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const auto blk = load<GgmlBlockQ8_0>(blocks, b);
    const float d = fp16_to_float(blk.d);
    float* y = out + b * kGgmlQK;
    for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(blk.qs[j]) * d;
  }
}

void ref_q2_k(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const auto blk = load<GgmlBlockQ2_K>(blocks, b);
    const float d = fp16_to_float(blk.d);
    const float dmin = fp16_to_float(blk.dmin);
    float* y = out + b * kGgmlQK_K;
    for (int g = 0; g < 16; ++g) {  // 16 values per scale byte, in value order
      const float dl = d * static_cast<float>(blk.scales[g] & 0xF);
      const float ml = dmin * static_cast<float>(blk.scales[g] >> 4);
      for (int i = 16 * g; i < 16 * g + 16; ++i) {
        y[i] = unfused(dl * static_cast<float>(q2_field(blk.qs, i))) - ml;
      }
    }
  }
}

void ref_q3_k(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const auto blk = load<GgmlBlockQ3_K>(blocks, b);
    const float d = fp16_to_float(blk.d);
    int scales[16];
    q3_k_scales(blk.scales, scales);
    float* y = out + b * kGgmlQK_K;
    for (int g = 0; g < 16; ++g) {
      const float dl = d * static_cast<float>(scales[g]);
      for (int i = 16 * g; i < 16 * g + 16; ++i) {
        // A clear hmask bit (bit i / 32 of byte i % 32) subtracts 4: values -4..3.
        const bool high = (blk.hmask[i % 32] >> (i / 32)) & 1;
        y[i] = dl * static_cast<float>(q2_field(blk.qs, i) - (high ? 0 : 4));
      }
    }
  }
}

void ref_q4_k(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const auto blk = load<GgmlBlockQ4_K>(blocks, b);
    const float d = fp16_to_float(blk.d);
    const float dmin = fp16_to_float(blk.dmin);
    uint8_t sc[8], m[8];
    unpack_k4_scales(blk.scales, sc, m);
    float* y = out + b * kGgmlQK_K;
    for (int s = 0; s < 8; ++s) {  // sub-block s: nibble s % 2 of bytes 32 * (s / 2) + l
      const float ds = d * static_cast<float>(sc[s]);
      const float ms = dmin * static_cast<float>(m[s]);
      const uint8_t* q = blk.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        y[32 * s + l] = unfused(ds * static_cast<float>((q[l] >> shift) & 0xF)) - ms;
      }
    }
  }
}

void ref_q5_k(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const auto blk = load<GgmlBlockQ5_K>(blocks, b);
    const float d = fp16_to_float(blk.d);
    const float dmin = fp16_to_float(blk.dmin);
    uint8_t sc[8], m[8];
    unpack_k4_scales(blk.scales, sc, m);
    float* y = out + b * kGgmlQK_K;
    for (int s = 0; s < 8; ++s) {  // as Q4_K, the fifth bit of value l in bit s of qh[l]
      const float ds = d * static_cast<float>(sc[s]);
      const float ms = dmin * static_cast<float>(m[s]);
      const uint8_t* q = blk.qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0xF) | (((blk.qh[l] >> s) & 1) << 4);
        y[32 * s + l] = unfused(ds * static_cast<float>(v)) - ms;
      }
    }
  }
}

void ref_q6_k(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const auto blk = load<GgmlBlockQ6_K>(blocks, b);
    const float d = fp16_to_float(blk.d);
    float* y = out + b * kGgmlQK_K;
    for (int i = 0; i < 256; ++i) {
      // Per half of 128: quarter r of the half takes nibble r / 2 of ql[64 * half + 32 * (r %
      // 2) + l] and bits 2r..2r+1 of qh[32 * half + l].
      const int half = i / 128, r = (i % 128) / 32, l = i % 32;
      const int low = (blk.ql[64 * half + 32 * (r % 2) + l] >> (4 * (r / 2))) & 0xF;
      const int high = (blk.qh[32 * half + l] >> (2 * r)) & 3;
      const int q = (low | (high << 4)) - 32;
      // (d * scale) first, then times q: ggml's left-to-right order.
      const float ds = d * static_cast<float>(blk.scales[i / 16]);
      y[i] = ds * static_cast<float>(q);
    }
  }
}

void ref_mxfp4(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const auto blk = load<GgmlBlockMxfp4>(blocks, b);
    const float d = e8m0_half(blk.e);
    float* y = out + b * kGgmlQK;
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(kMxfp4Doubled[blk.qs[j] & 0xF]) * d;
      y[j + 16] = static_cast<float>(kMxfp4Doubled[blk.qs[j] >> 4]) * d;
    }
  }
}

void ref_iq4_nl(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const auto blk = load<GgmlBlockIq4Nl>(blocks, b);
    const float d = fp16_to_float(blk.d);
    float* y = out + b * kGgmlQK;
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kGgmlIq4Values[blk.qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kGgmlIq4Values[blk.qs[j] >> 4]);
    }
  }
}

int iq4_xs_scale(const GgmlBlockIq4Xs& b, int j) {
  const int low = (b.scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
  const int high = (b.scales_h >> (2 * j)) & 3;
  return (low | (high << 4)) - 32;
}

void ref_iq4_xs(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const auto blk = load<GgmlBlockIq4Xs>(blocks, b);
    const float d = fp16_to_float(blk.d);
    float* y = out + b * kGgmlQK_K;
    for (int s = 0; s < 8; ++s) {
      // (d * scale) first, then times the grid value: ggml's order.
      const float dl = d * static_cast<float>(iq4_xs_scale(blk, s));
      const uint8_t* q = blk.qs + 16 * s;
      for (int j = 0; j < 16; ++j) {
        y[32 * s + j] = dl * static_cast<float>(kGgmlIq4Values[q[j] & 0xF]);
        y[32 * s + j + 16] = dl * static_cast<float>(kGgmlIq4Values[q[j] >> 4]);
      }
    }
  }
}

}  // namespace ggml_detail

namespace {

using namespace ggml_detail;  // NOLINT: the reference names, in this table only

constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::kF32, "F32", 1, 4, true, ref_f32},
    {GgmlType::kF16, "F16", 1, 2, true, ref_f16},
    {GgmlType::kQ4_0, "Q4_0", 32, 18, true, ref_q4_0},
    {GgmlType::kQ4_1, "Q4_1", 32, 20, true, ref_q4_1},
    {GgmlType::kQ5_0, "Q5_0", 32, 22, true, ref_q5_0},
    {GgmlType::kQ5_1, "Q5_1", 32, 24, true, ref_q5_1},
    {GgmlType::kQ8_0, "Q8_0", 32, 34, true, ref_q8_0},
    {GgmlType::kQ8_1, "Q8_1", 32, 36, false, nullptr},
    {GgmlType::kQ2_K, "Q2_K", 256, 84, true, ref_q2_k},
    {GgmlType::kQ3_K, "Q3_K", 256, 110, true, ref_q3_k},
    {GgmlType::kQ4_K, "Q4_K", 256, 144, true, ref_q4_k},
    {GgmlType::kQ5_K, "Q5_K", 256, 176, true, ref_q5_k},
    {GgmlType::kQ6_K, "Q6_K", 256, 210, true, ref_q6_k},
    {GgmlType::kQ8_K, "Q8_K", 256, 292, false, nullptr},
    {GgmlType::kIQ2_XXS, "IQ2_XXS", 256, 66, false, nullptr},
    {GgmlType::kIQ2_XS, "IQ2_XS", 256, 74, false, nullptr},
    {GgmlType::kIQ3_XXS, "IQ3_XXS", 256, 98, false, nullptr},
    {GgmlType::kIQ1_S, "IQ1_S", 256, 50, false, nullptr},
    {GgmlType::kIQ4_NL, "IQ4_NL", 32, 18, true, ref_iq4_nl},
    {GgmlType::kIQ3_S, "IQ3_S", 256, 110, false, nullptr},
    {GgmlType::kIQ2_S, "IQ2_S", 256, 82, false, nullptr},
    {GgmlType::kIQ4_XS, "IQ4_XS", 256, 136, true, ref_iq4_xs},
    {GgmlType::kI8, "I8", 1, 1, false, nullptr},
    {GgmlType::kI16, "I16", 1, 2, false, nullptr},
    {GgmlType::kI32, "I32", 1, 4, false, nullptr},
    {GgmlType::kI64, "I64", 1, 8, false, nullptr},
    {GgmlType::kF64, "F64", 1, 8, false, nullptr},
    {GgmlType::kIQ1_M, "IQ1_M", 256, 56, false, nullptr},
    {GgmlType::kBF16, "BF16", 1, 2, true, ref_bf16},
    {GgmlType::kTQ1_0, "TQ1_0", 256, 54, false, nullptr},
    {GgmlType::kTQ2_0, "TQ2_0", 256, 66, false, nullptr},
    {GgmlType::kMXFP4, "MXFP4", 32, 17, true, ref_mxfp4},
};

constexpr int kIdCount = 40;

// Position in kTypes by id; -1 for ids ggml does not define.
constexpr std::array<int8_t, kIdCount> make_index() {
  std::array<int8_t, kIdCount> idx{};
  for (auto& v : idx) v = -1;
  for (size_t i = 0; i < std::size(kTypes); ++i) {
    idx[static_cast<uint32_t>(kTypes[i].type)] = static_cast<int8_t>(i);
  }
  return idx;
}
constexpr std::array<int8_t, kIdCount> kIndex = make_index();

constexpr GgmlKernels make_scalar_kernels() {
  GgmlKernels k{IsaLevel::kScalar, {}};
  for (const GgmlTypeInfo& t : kTypes) k.dequant[static_cast<uint32_t>(t.type)] = t.reference;
  return k;
}

}  // namespace

constinit const GgmlKernels ggml_detail::kScalarGgml = make_scalar_kernels();

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  if (id >= kIdCount || kIndex[id] < 0) return nullptr;
  return &kTypes[kIndex[id]];
}

std::string_view ggml_supported_type_list() {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, "
         "IQ4_XS, MXFP4";
}

int64_t ggml_row_bytes(GgmlType t, int64_t ne0) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
  if (info == nullptr || info->block_bytes == 0 || ne0 < 0 || ne0 % info->block != 0) return -1;
  const int64_t blocks = ne0 / info->block;
  if (blocks > INT64_MAX / info->block_bytes) return -1;  // a row no file can hold
  return blocks * info->block_bytes;
}

namespace {
// No AVX-512 table is written where it says null: the AVX2 one serves.
constexpr IsaTable<GgmlKernels> kGgmlKernelsTable{&ggml_detail::kScalarGgml,
                                                  &ggml_detail::kAvx2Ggml, nullptr};
}  // namespace

const GgmlKernels* ggml_kernels_for(IsaLevel level) { return kGgmlKernelsTable.at(level); }

const GgmlKernels& ggml_kernels() {
  static const GgmlKernels& k = kGgmlKernelsTable.select();
  return k;
}

bool ggml_mxfp4_row_to_ocp(const uint8_t* blocks, int64_t k, uint8_t* codes, uint8_t* scales) {
  if (k < 0 || k % kGgmlQK != 0) return false;
  for (int64_t b = 0; b < k / kGgmlQK; ++b) {
    const uint8_t* blk = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockMxfp4));
    if (blk[0] == 0xFF) return false;
    scales[b] = blk[0];
    // ggml keeps weight j in the low nibble of byte j and weight j + 16 in its high one; OCP
    // packs adjacent pairs. ggml's code 8 is +0, OCP's 8 is -0.
    uint8_t c[kGgmlQK];
    for (int j = 0; j < kGgmlQK / 2; ++j) {
      c[j] = blk[1 + j] & 0xF;
      c[j + kGgmlQK / 2] = blk[1 + j] >> 4;
    }
    for (uint8_t& v : c) v = v == 8 ? 0 : v;
    uint8_t* out = codes + b * (kGgmlQK / 2);
    for (int j = 0; j < kGgmlQK / 2; ++j)
      out[j] = static_cast<uint8_t>(c[2 * j] | c[2 * j + 1] << 4);
  }
  return true;
}

}  // namespace mx
