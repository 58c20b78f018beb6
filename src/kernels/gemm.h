// Dense matmul with BF16 weights and FP32 activations: y[m, n] = sum_k x[m, k] * w[n, k],
// accumulated in FP32. One table per ISA, chosen once; the table entry computes a slice of
// output columns so callers can split N across threads.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

struct GemmBf16Args {
  const float* x;     // [m, k], row stride ldx
  const uint16_t* w;  // [n, k] BF16, row stride ldw
  float* y;           // [m, n], row stride ldy
  int64_t m, k;
  int64_t ldx, ldw, ldy;
};

struct GemmKernels {
  IsaLevel isa;
  // Columns [n_begin, n_end) of y.
  void (*bf16)(const GemmBf16Args& a, int64_t n_begin, int64_t n_end);
};

const GemmKernels* gemm_kernels_for(IsaLevel level);
const GemmKernels& gemm_kernels();

namespace gemm_detail {
extern const GemmKernels kScalarGemm;
extern const GemmKernels kAvx2Gemm;
}  // namespace gemm_detail

}  // namespace mx
