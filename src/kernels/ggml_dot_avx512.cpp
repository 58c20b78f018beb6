// The AVX-512 (VNNI on 256-bit vectors) table of the integer GEMM over ggml blocks
// (ggml_dot_simd.h).
#include "kernels/ggml_dot_simd.h"

namespace mx::ggml_dot_detail {

const GgmlDotKernels kAvx512GgmlDot = {IsaLevel::kAvx512, quantize_simd, gemm_simd};

}  // namespace mx::ggml_dot_detail
