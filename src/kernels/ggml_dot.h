// Matmul over weights kept in their GGUF blocks with llama.cpp's numerics: each activation row
// is quantized once to the weight type's dot-product type (ggml's vec_dot_type) and every
// block runs integer dot products, y[m, n] = sum_k xq[m, k] * w[n, k].
//
// Dot-product types. Q8_0: per 32 values an FP16 scale d = amax / 127 (the codes computed
// with the FP32 127 / amax, rounded half to even). Q8_1, which ggml pairs with Q4_1 and Q5_1,
// holds the same codes and scale plus s = d * sum(codes), so one 32-block type serves all
// three; here s is kept with every 32-block. Q8_K: per 256 values an FP32 scale 1 / iscale,
// iscale = -127 / v for v the value of largest magnitude (the positive one on a tie of
// magnitudes), codes round(iscale * x) half to even and capped at 127, and the sum of each 16
// codes.
//
// A quantized row of k values occupies ggml_act_row_bytes(type, k), a multiple of 64:
//   int8 codes [k], FP32 scales [k / block], then Q8_0: FP32 s [k / 32]; Q8_K: int16 sums
//   [k / 16].
//
// Precision. The scalar reference (kScalarGgmlDot) dequantizes each weight block with the
// type's reference dequantizer and each activation block as d * code, and sums their
// products in double: the value of the integer dot product the fast variants compute, whose
// integer sums are exact and whose remaining FP32 operations (per block: scale products, one
// conversion of the integer sum, one addition) round a handful of times per block. Every
// variant quantizes activations to the same codes and scales bit for bit.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "formats/ggml_types.h"

namespace mx {

enum class GgmlActType { kQ8_0, kQ8_K };

// Whether weights of type `t` run on integer dot products (every quantized type mxserve
// reads; F32, F16 and BF16 do not).
bool ggml_has_int_dot(GgmlType t);
// The dot-product type of `t` (only where ggml_has_int_dot).
GgmlActType ggml_act_type(GgmlType t);
// Values per block of an activation type (32 or 256).
int64_t ggml_act_block(GgmlActType a);
// Bytes of one quantized row of k values (k a multiple of the block), a multiple of 64.
int64_t ggml_act_row_bytes(GgmlActType a, int64_t k);

struct GgmlDotArgs {
  GgmlType type;
  const uint8_t* w;  // [n] rows of row_bytes = ggml_row_bytes(type, k)
  int64_t row_bytes;
  const uint8_t* xq;  // [m] rows quantized to ggml_act_type(type), `xq_stride` bytes apart
  int64_t xq_stride;
  float* y;  // [m, n], row stride ldy
  int64_t m, k, ldy;
  // Nonzero: `w` holds the table's panels of this many rows (repack); row_bytes stays the
  // stored rows' size.
  int panel = 0;
};

struct GgmlDotKernels {
  IsaLevel isa;
  // One row of k values into `row` (ggml_act_row_bytes(a, k) bytes).
  void (*quantize)(GgmlActType a, const float* x, int64_t k, uint8_t* row);
  // Columns [n_begin, n_end) of y.
  void (*gemm)(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end);
  // Rows of type t that gemm reads interleaved as one panel (ik_llama.cpp's row-interleaved
  // layouts), repacked once at load; 0 where it reads the rows as stored.
  int (*panel_rows)(GgmlType t);
  // Rows [0, n) of k values, row_bytes apart, into ggml_panel_bytes(t, panel_rows(t), n, k)
  // bytes of panels at `out`; the last panel's rows past n are zero. Only where panel_rows(t).
  void (*repack)(GgmlType t, const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                 uint8_t* out);
};

// Bytes of the panels holding n rows: the rows' own bytes, n rounded up to whole panels.
int64_t ggml_panel_bytes(GgmlType t, int panel, int64_t n, int64_t k);

const GgmlDotKernels* ggml_dot_kernels_for(IsaLevel level);
const GgmlDotKernels& ggml_dot_kernels();

namespace ggml_dot_detail {
extern const GgmlDotKernels kScalarGgmlDot;
extern const GgmlDotKernels kAvx2GgmlDot;
extern const GgmlDotKernels kAvx512GgmlDot;

// The AVX-512 table's panels of sixteen rows, for every quantized type but MXFP4
// (ggml_panel_avx512.cpp, ggml_panel_k2_avx512.cpp, ggml_panel_b32_avx512.cpp).
int panel_rows_avx512(GgmlType t);
void repack_avx512(GgmlType t, const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                   uint8_t* out);
void gemm_panels_avx512(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end);
// The AVX2 table's panels: the same sixteen-row panels as AVX-512's, read as two halves of
// eight rows, for every quantized type but MXFP4 (ggml_panel_avx2.cpp).
int panel_rows_avx2(GgmlType t);
void repack_avx2(GgmlType t, const uint8_t* rows, int64_t row_bytes, int64_t n, int64_t k,
                 uint8_t* out);
void gemm_panels_avx2(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end);
// No panels: every type read as stored.
int no_panels(GgmlType t);

// Where the parts of a quantized row start.
struct ActRowView {
  const int8_t* codes;
  const float* d;
  const float* s;       // Q8_0: d * sum of each 32 codes
  const int16_t* sums;  // Q8_K: sum of each 16 codes
};
inline ActRowView act_row_view(GgmlActType a, const uint8_t* row, int64_t k) {
  ActRowView v{};
  v.codes = reinterpret_cast<const int8_t*>(row);
  v.d = reinterpret_cast<const float*>(row + k);
  if (a == GgmlActType::kQ8_0) {
    v.s = v.d + k / 32;
  } else {
    v.sums = reinterpret_cast<const int16_t*>(v.d + k / 256);
  }
  return v;
}
}  // namespace ggml_dot_detail

}  // namespace mx
