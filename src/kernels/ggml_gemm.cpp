// Scalar reference of the GEMM over ggml blocks (ggml_gemm.h) and the per-ISA dispatch.
#include "kernels/ggml_gemm.h"

#include "core/isa_table.h"

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

namespace {
// No AVX-512 table is written where it says null: the AVX2 one serves.
constexpr IsaTable<GgmlGemmKernels> kGgmlGemmKernelsTable{
    &ggml_gemm_detail::kScalarGgmlGemm, &ggml_gemm_detail::kAvx2GgmlGemm, nullptr};
}  // namespace

const GgmlGemmKernels* ggml_gemm_kernels_for(IsaLevel level) {
  return kGgmlGemmKernelsTable.at(level);
}

const GgmlGemmKernels& ggml_gemm_kernels() {
  static const GgmlGemmKernels& k = kGgmlGemmKernelsTable.select();
  return k;
}

}  // namespace mx
