// Matmul of MX-quantized activations with MX-quantized weights:
//   y[i, n] = sum over 32-blocks b of 2^(sa[i,b] + sw[n,b]) * dot32(a[i, b], w[n, b])
// and for dual-level MXFP4 the block sums of each 512-chunk are multiplied by s0a * s0w.
// Weights stay quantized in memory; each weight block is decoded once in registers and used
// for every activation row.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "formats/minifloat.h"

namespace mx {

// A quantized [rows, k] matrix: codes (FP8: k bytes per row; FP4: ceil(k/2), adjacent nibbles),
// E8M0 scales [rows, ceil(k/32)], and for dual-level FP4 the FP32 chunk scales
// [rows, ceil(k/512)].
struct MxMatrixView {
  ElemFormat format;
  const uint8_t* codes;
  const uint8_t* scales;
  const float* chunk_scales;  // null unless dual-level
  int64_t rows, k;
  int64_t row_bytes;  // stride of codes
};

// Activations decoded to FP32 once per call, block scales folded in (exact: a power of two
// times a short mantissa), zero-padded to whole 32-blocks: af[a.rows, ceil(k/32) * 32].
int64_t mx_decoded_stride(int64_t k);
void mx_decode_activations(const MxMatrixView& a, float* af);

// Columns [n_begin, n_end) of y [m, ldy] from decoded activations `af` (with the activations'
// chunk scales for dual-level FP4, else null) and quantized weights. acc: kMxGemmAccPerRow * m
// floats, 32-byte aligned.
constexpr int64_t kMxGemmAccPerRow = 16;
using MxGemmFn = void (*)(const float* af, const float* a_chunk_scales, int64_t m,
                          const MxMatrixView& w, float* y, int64_t ldy, int64_t n_begin,
                          int64_t n_end, float* acc);

struct MxGemmKernels {
  IsaLevel isa;
  MxGemmFn gemm;
};
const MxGemmKernels* mx_gemm_kernels_for(IsaLevel level);
const MxGemmKernels& mx_gemm_kernels();

namespace mx_gemm_detail {
extern const MxGemmKernels kScalarMxGemm;
extern const MxGemmKernels kAvx2MxGemm;
}  // namespace mx_gemm_detail

}  // namespace mx
