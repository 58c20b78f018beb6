// Scalar reference of the GEMM over ggml blocks (ggml_gemm.h) and the per-ISA dispatch.
#include "kernels/ggml_gemm.h"

namespace mx {
namespace ggml_gemm_detail {
namespace {

// One weight row at a time, dequantized by the type's reference, then one FP32 sum per
// activation row in k order: the definition the fast variants are measured against.
void gemm_reference(const GgmlGemmArgs& a, int64_t n_begin, int64_t n_end, float* scratch) {
  const GgmlDequantFn dequant = ggml_type_info(a.type).reference;
  for (int64_t n = n_begin; n < n_end; ++n) {
    dequant(a.w + n * a.row_bytes, scratch, a.k);
    for (int64_t i = 0; i < a.m; ++i) {
      const float* x = a.x + i * a.ldx;
      float sum = 0.0f;
      for (int64_t j = 0; j < a.k; ++j) sum += x[j] * scratch[j];
      a.y[i * a.ldy + n] = sum;
    }
  }
}

}  // namespace

const GgmlGemmKernels kScalarGgmlGemm = {IsaLevel::kScalar, gemm_reference};

}  // namespace ggml_gemm_detail

const GgmlGemmKernels* ggml_gemm_kernels_for(IsaLevel level) {
  if (!isa_supported(level)) return nullptr;
  switch (level) {
    case IsaLevel::kScalar:
      return &ggml_gemm_detail::kScalarGgmlGemm;
    case IsaLevel::kAvx2:
      return &ggml_gemm_detail::kAvx2GgmlGemm;
    case IsaLevel::kAvx512:
      return nullptr;  // the AVX2 kernel serves until one is written
  }
  return nullptr;
}

const GgmlGemmKernels& ggml_gemm_kernels() {
  static const GgmlGemmKernels* k = [] {
    for (int l = static_cast<int>(active_isa()); l >= 0; --l) {
      if (const GgmlGemmKernels* p = ggml_gemm_kernels_for(static_cast<IsaLevel>(l))) return p;
    }
    return &ggml_gemm_detail::kScalarGgmlGemm;
  }();
  return *k;
}

}  // namespace mx
