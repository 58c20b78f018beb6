// The AVX2 table of the integer GEMM over ggml blocks (ggml_dot_simd.h).
#include "kernels/ggml_dot_simd.h"

namespace mx::ggml_dot_detail {

const GgmlDotKernels kAvx2GgmlDot = {IsaLevel::kAvx2, quantize_simd, gemm_simd, no_panels, nullptr};

}  // namespace mx::ggml_dot_detail
