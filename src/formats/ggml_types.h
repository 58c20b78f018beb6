// llama.cpp's (ggml's) tensor types as GGUF files store them: one row per type (name, values
// per block, bytes per block, whether mxserve reads it) and the scalar reference dequantizer
// of each supported type, written from the block layouts. ggml rows are quantized
// independently along ne0 and a block never straddles a row.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cpu_features.h"

namespace mx {

// The ids ggml writes into GGUF tensor infos (ggml.h `enum ggml_type`).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
};

// Dequantizes `n` values (a multiple of the type's block) from `blocks` into `out`.
using GgmlDequantFn = void (*)(const uint8_t* blocks, float* out, int64_t n);

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;    // as ggml names it: "Q4_K", "MXFP4", "F16"
  int64_t block;            // values per block (1 for F32/F16/BF16)
  int64_t block_bytes;      // bytes per block (0 when unknown to mxserve)
  bool supported;           // mxserve reads and runs it
  GgmlDequantFn reference;  // scalar reference; null when unsupported
};

// The row of a type id; null for an id ggml does not define.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
inline const GgmlTypeInfo& ggml_type_info(GgmlType t) {
  return *ggml_type_info(static_cast<uint32_t>(t));
}
// "F32, F16, BF16, Q4_0, ..." for messages.
std::string_view ggml_supported_type_list();
// Bytes of one row of `ne0` values; -1 when ne0 is negative or not a multiple of the block,
// or `t` is not a ggml id.
int64_t ggml_row_bytes(GgmlType t, int64_t ne0);

// Per-ISA dequantizers: fast paths where load or run time shows they matter, the reference
// elsewhere. Every entry equals the reference bit for bit.
struct GgmlKernels {
  IsaLevel isa;
  GgmlDequantFn dequant[40];  // indexed by type id; null for unsupported ids
};
const GgmlKernels* ggml_kernels_for(IsaLevel level);
const GgmlKernels& ggml_kernels();

// ggml MXFP4 blocks (E8M0 byte e, then 16 bytes: element j low nibble, j + 16 high nibble of
// byte j) of one row of k values into OCP MXFP4: adjacent nibble order (element 2i low) and
// one E8M0 scale byte per 32. ggml's value is 2^(e-128) x doubled E2M1 = 2^(e-127) x E2M1, so
// the OCP scale byte is e itself and the codes stay the same, except code 8: ggml decodes it
// to +0 (kvalues_mxfp4[8] = 0) where OCP decodes -0, so it is written as code 0 and every
// value stays the same bit for bit. e == 255 (2^127 in ggml, NaN in OCP) cannot be expressed
// and returns false, as does k not a multiple of 32.
bool ggml_mxfp4_row_to_ocp(const uint8_t* blocks, int64_t k, uint8_t* codes, uint8_t* scales);

// Block layouts of the supported quantized types (ggml-common.h). FP16 fields are raw bits;
// read blocks with memcpy (a row of blocks need not be aligned to the struct).
constexpr int64_t kGgmlQK = 32;     // values per block of the 32-blocks
constexpr int64_t kGgmlQK_K = 256;  // values per K-quant super-block

struct GgmlBlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];  // element j low nibble, j + 16 high nibble; value (q - 8) * d
};
struct GgmlBlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];  // as Q4_0; value q * d + m
};
struct GgmlBlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // little-endian: bit j is the fifth bit of element j
  uint8_t qs[16];
};
struct GgmlBlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct GgmlBlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct GgmlBlockQ2_K {
  uint8_t scales[16];  // low nibble scale, high nibble min, per 16 values
  uint8_t qs[64];
  uint16_t d, dmin;
};
struct GgmlBlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];  // 16 six-bit scales, biased by 32
  uint16_t d;
};
struct GgmlBlockQ4_K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 six-bit scales and 8 six-bit mins, per 32 values
  uint8_t qs[128];
};
struct GgmlBlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
struct GgmlBlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];  // signed, per 16 values
  uint16_t d;
};
struct GgmlBlockIq4Nl {
  uint16_t d;
  uint8_t qs[16];  // as Q4_0; value kGgmlIq4Values[q] * d
};
struct GgmlBlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;    // top two bits of sub-block j's scale at bits 2j..2j+1
  uint8_t scales_l[4];  // low four bits: sub-block j in nibble j % 2 of byte j / 2
  uint8_t qs[128];      // per 32-value sub-block 16 bytes, ordered as Q4_0's
};
// The non-linear 4-bit grid of IQ4_NL and IQ4_XS (ggml-common.h kvalues_iq4nl).
inline constexpr int8_t kGgmlIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                              1,    13,   25,  38,  53,  69,  89,  113};
struct GgmlBlockMxfp4 {
  uint8_t e;  // E8M0: d = 2^(e - 128) against the doubled E2M1 table
  uint8_t qs[16];
};
static_assert(sizeof(GgmlBlockQ4_0) == 18);
static_assert(sizeof(GgmlBlockQ4_1) == 20);
static_assert(sizeof(GgmlBlockQ5_0) == 22);
static_assert(sizeof(GgmlBlockQ5_1) == 24);
static_assert(sizeof(GgmlBlockQ8_0) == 34);
static_assert(sizeof(GgmlBlockQ2_K) == 84);
static_assert(sizeof(GgmlBlockQ3_K) == 110);
static_assert(sizeof(GgmlBlockQ4_K) == 144);
static_assert(sizeof(GgmlBlockQ5_K) == 176);
static_assert(sizeof(GgmlBlockQ6_K) == 210);
static_assert(sizeof(GgmlBlockMxfp4) == 17);
static_assert(sizeof(GgmlBlockIq4Nl) == 18);
static_assert(sizeof(GgmlBlockIq4Xs) == 136);

namespace ggml_detail {
// The scalar references, one per supported type (what GgmlTypeInfo::reference points to).
void ref_f32(const uint8_t* blocks, float* out, int64_t n);
void ref_f16(const uint8_t* blocks, float* out, int64_t n);
void ref_bf16(const uint8_t* blocks, float* out, int64_t n);
void ref_q4_0(const uint8_t* blocks, float* out, int64_t n);
void ref_q4_1(const uint8_t* blocks, float* out, int64_t n);
void ref_q5_0(const uint8_t* blocks, float* out, int64_t n);
void ref_q5_1(const uint8_t* blocks, float* out, int64_t n);
void ref_q8_0(const uint8_t* blocks, float* out, int64_t n);
void ref_q2_k(const uint8_t* blocks, float* out, int64_t n);
void ref_q3_k(const uint8_t* blocks, float* out, int64_t n);
void ref_q4_k(const uint8_t* blocks, float* out, int64_t n);
void ref_q5_k(const uint8_t* blocks, float* out, int64_t n);
void ref_q6_k(const uint8_t* blocks, float* out, int64_t n);
void ref_mxfp4(const uint8_t* blocks, float* out, int64_t n);
void ref_iq4_nl(const uint8_t* blocks, float* out, int64_t n);
void ref_iq4_xs(const uint8_t* blocks, float* out, int64_t n);
// Sub-block j's IQ4_XS scale, unbiased: -32..31.
int iq4_xs_scale(const GgmlBlockIq4Xs& b, int j);
// The eight 6-bit scales and mins of a Q4_K / Q5_K super-block, one per 32 values.
void unpack_k4_scales(const uint8_t scales[12], uint8_t sc[8], uint8_t m[8]);
// The sixteen six-bit scales of a Q3_K super-block, unbiased: -32..31, one per 16 values.
void q3_k_scales(const uint8_t s[12], int scales[16]);
// Value i's 2-bit field of a Q2_K / Q3_K super-block's 64 bytes of qs.
int q2_field(const uint8_t* qs, int i);

extern const GgmlKernels kScalarGgml;
extern const GgmlKernels kAvx2Ggml;
}  // namespace ggml_detail

}  // namespace mx
