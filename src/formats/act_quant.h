// Per-row activation quantization to MXFP8 (E4M3) and MXFP4 (E2M1, adjacent nibble order):
// one table of kernels per ISA, chosen once at start. Every variant is bit-identical to the
// scalar reference (mx_quantize_row + fp4_pack).
//
// This header holds declarations only: the ISA translation units include it, and an inline
// function compiled with AVX-512 flags could otherwise be picked by the linker for all callers.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

enum class ScaleRule : uint8_t;

// codes: k bytes (MXFP8) or ceil(k/2) bytes (MXFP4); scales: ceil(k/32) E8M0 bytes.
struct ActQuantKernels {
  IsaLevel isa;
  void (*f32_to_mxfp8)(const float* x, int64_t k, ScaleRule rule, uint8_t* codes, uint8_t* scales);
  void (*bf16_to_mxfp8)(const uint16_t* x, int64_t k, ScaleRule rule, uint8_t* codes,
                        uint8_t* scales);
  void (*f32_to_mxfp4)(const float* x, int64_t k, ScaleRule rule, uint8_t* packed, uint8_t* scales);
  void (*bf16_to_mxfp4)(const uint16_t* x, int64_t k, ScaleRule rule, uint8_t* packed,
                        uint8_t* scales);
};

// The kernels of one level; null when this binary or processor lacks it.
const ActQuantKernels* act_quant_kernels_for(IsaLevel level);
// The kernels of active_isa(), resolved once.
const ActQuantKernels& act_quant_kernels();

namespace act_quant_detail {
// The reference for one block of n <= 32 values; fast paths call it for blocks they do not
// handle (partial, zero, subnormal or non-finite amax) so every path shares one rule.
void block_f32_to_mxfp8(const float* x, int n, ScaleRule rule, uint8_t* codes, uint8_t* scale);
void block_bf16_to_mxfp8(const uint16_t* x, int n, ScaleRule rule, uint8_t* codes, uint8_t* scale);
void block_f32_to_mxfp4(const float* x, int n, ScaleRule rule, uint8_t* packed, uint8_t* scale);
void block_bf16_to_mxfp4(const uint16_t* x, int n, ScaleRule rule, uint8_t* packed, uint8_t* scale);
extern const ActQuantKernels kScalarKernels;
extern const ActQuantKernels kAvx2Kernels;
extern const ActQuantKernels kAvx512Kernels;
}  // namespace act_quant_detail

}  // namespace mx
