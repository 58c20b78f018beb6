// MX block quantization: the scalar reference of the numeric contract (MX_FORMATS.md).
// Blocks are 32 consecutive values along K; a trailing partial block counts only its real
// values. Codes here are unpacked, one byte per element (E2M1 in the low nibble); see
// mx_layout.h for FP4 packing and scale layouts.
#pragma once

#include <cstdint>
#include <string_view>

#include "formats/minifloat.h"

namespace mx {

constexpr int kMxBlock = 32;
constexpr int kMxDualChunk = 512;  // the coarse FP32 scale of dual-level MXFP4

enum class ScaleRule : uint8_t {
  kFloor,  // OCP: floor(log2 amax) - emax_elem; may saturate the largest elements
  kRceil,  // ceil(log2(amax / max_elem)); never saturates
};
std::string_view scale_rule_name(ScaleRule rule);
bool parse_scale_rule(std::string_view text, ScaleRule* out);

inline int64_t mx_num_blocks(int64_t k) { return (k + kMxBlock - 1) / kMxBlock; }
inline int64_t mx_num_chunks(int64_t k) { return (k + kMxDualChunk - 1) / kMxDualChunk; }

// The E8M0 byte for a block whose largest magnitude is `amax` (>= 0 or NaN): 0 for zero,
// 0xFF for Inf or NaN, else the rule's exponent clamped to [-127, 127], plus 127.
uint8_t mx_scale_byte(float amax, ElemFormat format, ScaleRule rule);

// One block of n <= 32 values.
void mx_quantize_block(const float* x, int n, ElemFormat format, ScaleRule rule, uint8_t* codes,
                       uint8_t* scale);
// A row of k values: codes[k], scales[ceil(k/32)].
void mx_quantize_row(const float* x, int64_t k, ElemFormat format, ScaleRule rule, uint8_t* codes,
                     uint8_t* scales);
void mx_dequantize_row(const uint8_t* codes, const uint8_t* scales, int64_t k, ElemFormat format,
                       float* out);

// Dual-level MXFP4: s0[ceil(k/512)] FP32 coarse scales, then E8M0 per 32 of the BF16-rounded
// x / s0, then E2M1 codes.
void mxfp4_dual_quantize_row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales, float* s0);
void mxfp4_dual_dequantize_row(const uint8_t* codes, const uint8_t* scales, const float* s0,
                               int64_t k, float* out);

}  // namespace mx
