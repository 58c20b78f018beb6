// The AVX2 table of the integer GEMM over ggml blocks: the row kernels of ggml_dot_simd.h, and
// the panels of ggml_panel_avx2.cpp for the types it repacks.
#include "kernels/ggml_dot_simd.h"

namespace mx::ggml_dot_detail {
namespace {

void gemm_avx2(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end) {
  if (a.panel != 0) {
    gemm_panels_avx2(a, n_begin, n_end);
    return;
  }
  gemm_simd(a, n_begin, n_end);
}

}  // namespace

const GgmlDotKernels kAvx2GgmlDot = {IsaLevel::kAvx2, quantize_simd, gemm_avx2, panel_rows_avx2,
                                     repack_avx2};

}  // namespace mx::ggml_dot_detail
