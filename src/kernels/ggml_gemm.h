// Matmul over weights kept in their GGUF blocks: y[m, n] = sum_k x[m, k] * w[n, k] with FP32
// activations and FP32 accumulation. Rows of blocks are dequantized a few at a time into FP32
// scratch that stays in L1 (or in registers), so the weights are never expanded in memory,
// and each dequantized row serves every activation row of the call. The result is that of
// dequantizing the whole matrix to FP32 first, up to the order of the FP32 sums.
//
// Precision. The scalar reference (kScalarGgmlGemm) dequantizes each row with the type's
// reference dequantizer and sums x * w in FP32 in k order. The other variants dequantize to
// the same values bit for bit (ggml_kernels_for(level)->dequant, or the same FP32 operations
// in registers) and differ from it only in the order of the FP32 sums (and in FMA's unrounded
// products). Any such order leaves each term at most k roundings, so every variant is within
//   gamma_k * S + k * 2^-149,   S = sum_k |x * w|, gamma_k = k u / (1 - k u), u = 2^-24,
// of the exact dot product (the second term for subnormal roundings), and two variants agree
// within twice that; gamma_k <= k * 2^-23 while k u <= 1/2. Within one variant an output does
// not depend on m, on the row's place in the batch or on [n_begin, n_end): a batched call
// gives each row the bits it gets alone.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "formats/ggml_types.h"

namespace mx {

// Weight rows a table entry dequantizes at a time; scratch holds that many rows of k floats.
constexpr int64_t kGgmlGemmRows = 4;

struct GgmlGemmArgs {
  GgmlType type;
  const uint8_t* w;  // [n] rows of row_bytes = ggml_row_bytes(type, k)
  int64_t row_bytes;
  const float* x;  // [m, k], row stride ldx
  float* y;        // [m, n], row stride ldy
  int64_t m, k;
  int64_t ldx, ldy;
};

struct GgmlGemmKernels {
  IsaLevel isa;
  // Columns [n_begin, n_end) of y. `scratch` holds kGgmlGemmRows * k floats, 32-byte aligned,
  // owned by the calling thread.
  void (*gemm)(const GgmlGemmArgs& a, int64_t n_begin, int64_t n_end, float* scratch);
};

const GgmlGemmKernels* ggml_gemm_kernels_for(IsaLevel level);
const GgmlGemmKernels& ggml_gemm_kernels();

namespace ggml_gemm_detail {
extern const GgmlGemmKernels kScalarGgmlGemm;
extern const GgmlGemmKernels kAvx2GgmlGemm;
}  // namespace ggml_gemm_detail

}  // namespace mx
