// Dense matmul with BF16 weights and FP32 activations: y[m, n] = sum_k x[m, k] * w[n, k],
// accumulated in FP32. One table per ISA, chosen once; the table entry computes a slice of
// output columns so callers can split N across threads.
//
// Weights are packed once at load into column panels of kBf16PanelCols outputs: panel p holds,
// for k = 0 .. K-1 in order, the weights of columns 16p .. 16p+15 at that k. Within those 16,
// column c sits at position 2c and column 8 + c at 2c + 1, so one 256-bit load widens to eight
// columns with a 16-bit shift and to the other eight with a mask, and each output lane keeps
// one FMA chain over k: no horizontal sums, and a row's result does not depend on how many
// rows share the call. The last panel is zero-padded.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace mx {

constexpr int64_t kBf16PanelCols = 16;

// Elements of the packed form of an [n, k] matrix.
constexpr int64_t bf16_panel_elems(int64_t n, int64_t k) {
  return (n + kBf16PanelCols - 1) / kBf16PanelCols * kBf16PanelCols * k;
}
// Index of w[col, kk] in the packed form of a matrix with k inputs.
constexpr int64_t bf16_panel_index(int64_t col, int64_t kk, int64_t k) {
  const int64_t c = col % kBf16PanelCols;
  return (col / kBf16PanelCols) * kBf16PanelCols * k + kk * kBf16PanelCols +
         (c < 8 ? 2 * c : 2 * (c - 8) + 1);
}
// Packs w ([n, k], row stride ldw) into out (bf16_panel_elems(n, k) elements).
void pack_bf16_panels(const uint16_t* w, int64_t n, int64_t k, int64_t ldw, uint16_t* out);
// AVX-512's own panels, the same size and panel order: within a panel, k in pairs, pair j
// holding column c's weights at k = 2j and 2j + 1 at positions 32j + 2c and 32j + 2c + 1; an
// odd k's last k holds column c at 32 * (k / 2) + c.
constexpr int64_t bf16_panel_index_avx512(int64_t col, int64_t kk, int64_t k) {
  const int64_t c = col % kBf16PanelCols, base = (col / kBf16PanelCols) * kBf16PanelCols * k;
  if (k % 2 != 0 && kk == k - 1) return base + (k - 1) * kBf16PanelCols + c;
  return base + (kk / 2) * 2 * kBf16PanelCols + 2 * c + kk % 2;
}
void pack_bf16_panels_avx512(const uint16_t* w, int64_t n, int64_t k, int64_t ldw, uint16_t* out);

struct GemmBf16Args {
  const float* x;     // [m, k], row stride ldx
  const uint16_t* w;  // packed panels of an [n, k] matrix
  float* y;           // [m, n], row stride ldy
  int64_t m, k;
  int64_t ldx, ldy;
};

struct GemmKernels {
  IsaLevel isa;
  // Packs weights at load into the layout this table's kernels read: pack_bf16_panels for
  // the scalar and AVX2 tables, pack_bf16_panels_avx512 for AVX-512.
  void (*pack)(const uint16_t* w, int64_t n, int64_t k, int64_t ldw, uint16_t* out);
  // Columns [n_begin, n_end) of y; n_begin is a multiple of kBf16PanelCols.
  void (*bf16)(const GemmBf16Args& a, int64_t n_begin, int64_t n_end);
};

const GemmKernels* gemm_kernels_for(IsaLevel level);
const GemmKernels& gemm_kernels();

namespace gemm_detail {
extern const GemmKernels kScalarGemm;
extern const GemmKernels kAvx2Gemm;
extern const GemmKernels kAvx512Gemm;
}  // namespace gemm_detail

}  // namespace mx
