// Matmul of MX-quantized activations with MX-quantized weights:
//   y[i, n] = sum over 32-blocks b of 2^(sa[i,b] + sw[n,b]) * dot32(a[i, b], w[n, b])
// and for dual-level MXFP4 each 512-chunk is also scaled by s0a * s0w.
//
// Weights stay quantized in memory, packed once at load into column panels of kMxPanelCols
// outputs, block by block along k, so that one 256-bit load feeds the panel's sixteen columns:
//   - E4M3 (512 bytes per panel and block): 32-byte row j holds k = 2j and 2j + 1; byte t of
//     dword lane l is column l + 8 * (t & 1) at k = 2j + t / 2.
//   - E2M1 (256 bytes): 32-byte row j holds k = 4j .. 4j + 3; nibble t of dword lane l is
//     column l + 8 * (t & 1) at k = 4j + t / 2.
// E4M3 weights (gemm) meet activations decoded to FP32 once per call (exact: a power of two
// times a short mantissa); a code's bits moved into an FP32 pattern with shifts and a mask
// read as its value times 2^-f (f = 120; subnormal codes become FP32 subnormals). Activations
// come pre-multiplied by kMxGemmInputScale = 2^64 so that these products stay normal, and block
// scales are stored as the FP32 exponent byte of 2^(s - 127 + f - 64 - g): each output sums a
// block's products in one FMA chain, then adds that sum times the block's scale vector (a
// zero-extend and a shift of the stored bytes) to its total. E2M1 weights (f = 126 in the
// stored scales) meet integer activations instead: an exact integer dot per block, then the
// same scaling (gemm_w4a4, gemm_w4a8). g > 0 only when a scale would overflow; the output is
// multiplied by 2^g. Every output sees the same operations whatever the tile shape or the
// rows beside it: results do not depend on the batch.
//
// Declarations only: ISA translation units include this header (see formats/act_quant.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "core/huge_pages.h"
#include "formats/minifloat.h"

namespace mx {

// A quantized [rows, k] matrix in row-major form: codes (FP8: k bytes per row; FP4:
// ceil(k/2), adjacent nibbles), E8M0 scales [rows, ceil(k/32)], and for dual-level FP4 the
// FP32 chunk scales [rows, ceil(k/512)].
struct MxMatrixView {
  ElemFormat format;
  const uint8_t* codes;
  const uint8_t* scales;
  const float* chunk_scales;  // null unless dual-level
  int64_t rows, k;
  int64_t row_bytes;  // stride of codes
};

// Activations decoded to FP32 times `factor`, block scales (and dual-level chunk scales)
// folded in, zero-padded to whole 32-blocks: af[a.rows, mx_decoded_stride(k)]. The GEMM takes
// them with factor kMxGemmInputScale.
constexpr float kMxGemmInputScale = 0x1p64f;
// The row stride (in elements) of every prepared activation layout: whole blocks, and one
// block more where that would be a multiple of 1024, so that rows never lie a power of two
// (4 KB or more) apart, where the prefill GEMM's row tiles would read them through a few
// cache sets.
int64_t mx_decoded_stride(int64_t k);
void mx_decode_activations(const MxMatrixView& a, float* af, float factor = 1.0f);

constexpr int64_t kMxPanelCols = 16;

// Packed weights of an [n, k] matrix (E4M3 or E2M1).
struct MxPanelView {
  ElemFormat format;
  const uint8_t* codes;       // [panels][blocks][mx_panel_block_bytes]
  const uint8_t* scales;      // [panels][blocks][16] FP32 exponent bytes
  const float* chunk_scales;  // [panels][chunks][16], null unless dual-level
  int64_t n, k;
  float post;  // 2^g
  // The least and greatest stored block scale over the real columns: where every block's
  // scale stays in FP32's normal range, a kernel may build it as an exponent (shift and add).
  uint8_t scale_min = 0, scale_max = 255;
};

constexpr int64_t mx_panels(int64_t n) { return (n + kMxPanelCols - 1) / kMxPanelCols; }
constexpr int64_t mx_panel_block_bytes(ElemFormat f) { return f == ElemFormat::kE2M1 ? 256 : 512; }
constexpr int64_t mx_panel_code_bytes(ElemFormat f, int64_t n, int64_t k) {
  return mx_panels(n) * ((k + 31) / 32) * mx_panel_block_bytes(f);
}
constexpr int64_t mx_panel_scale_bytes(int64_t n, int64_t k) {
  return mx_panels(n) * ((k + 31) / 32) * kMxPanelCols;
}
constexpr int64_t mx_panel_chunk_floats(int64_t n, int64_t k) {
  return mx_panels(n) * ((k + 511) / 512) * kMxPanelCols;
}
// 2^-f: what a code moved into an FP32 pattern reads as, relative to its value.
float mx_panel_code_unit(ElemFormat f);
// 2^(64 - f): turns a stored block scale into the weight's own 2^(s - 127 - g).
float mx_panel_scale_unit(ElemFormat f);

// Packs w (E4M3 or E2M1) into codes / scales / chunk_scales (sizes above; chunk_scales only
// when w has them) and returns the post factor 2^g. Padding columns and k are zero.
float pack_mx_panels(const MxMatrixView& w, uint8_t* codes, uint8_t* scales, float* chunk_scales);

// Packed weights with their storage, on huge pages; `view` points into it (moves keep it
// valid).
struct MxPanelWeights {
  HugeVector<uint8_t> codes, scales;
  HugeVector<float> chunk_scales;
  MxPanelView view{};
  MxPanelWeights() = default;
  MxPanelWeights(MxPanelWeights&&) = default;
  MxPanelWeights& operator=(MxPanelWeights&&) = default;
  MxPanelWeights(const MxPanelWeights&) = delete;
  MxPanelWeights& operator=(const MxPanelWeights&) = delete;
  uint64_t bytes() const { return codes.size() + scales.size() + chunk_scales.size() * 4; }
};
MxPanelWeights pack_mx_weights(const MxMatrixView& w);

// E2M1 activations for E2M1 weights (W4A4) as integers, for an exact int8 dot per block:
// q = twice each value ([-12, 12]), per block the sum of q and the scale
// 2^(s - 127) / 4 (times the chunk scale when dual-level). q: [rows, mx_decoded_stride(k)]
// (zero-padded), sums and scales: [rows, ceil(k/32)].
void mx_prepare_fp4_activations(const MxMatrixView& a, int8_t* q, int32_t* sums, float* scales);
// What the W4A4 kernels hold per weight code: 2 * value + 12, in [0, 24] so that it can be the
// unsigned operand of a byte multiply; the 12 * sum(q) this adds per block is taken off.
uint8_t mx_fp4_weight_offset_code(uint8_t code);
constexpr int32_t kMxFp4WeightOffset = 12;

// E4M3 activations for E2M1 weights (W4A8) in 14-bit fixed point, for an int16 dot per block:
// q = round-to-nearest-even(element * 32), |q| <= 448 * 32 < 2^14, exact for every element of
// magnitude 0.25 or more (a block's largest is at least 256 under the floor rule); smaller
// ones move by at most 2^-6, under 2^-14 of the block's largest. Within each four k the
// values are stored in the order k0, k2, k1, k3, so that one dword holds the pair that the
// panel's nibbles pair (mx_gemm.h's E2M1 layout). The weights enter as 256 * 2 * value, so a
// block's dot is 2^14 times the exact sum over the stored values, below 2^31 in magnitude;
// scales: 2^(s - 127 - 14). q: [rows, mx_decoded_stride(k)], scales: [rows, ceil(k/32)].
constexpr int kMxW4a8FracBits = 5;
void mx_prepare_fp8_activations_i16(const MxMatrixView& a, int16_t* q, float* scales);
// What the W4A8 kernels multiply per E2M1 weight code: 512 * value, in [-6144, 6144].
int32_t mx_w4a8_weight_int(uint8_t code);
// One E4M3 code in that fixed point (round(value * 32), NaN codes 0), in natural k order.
int16_t mx_w4a8_activation_int(uint8_t code);

struct MxGemmArgs {
  const float* x;  // [m, ldx] activations decoded with kMxGemmInputScale (gemm)
  const MxPanelView* w;
  float* y;  // [m, ldy]
  int64_t m, ldx, ldy;
  // gemm_w4a4: integer activations [m, ldx] with their block sums and scales [m, ceil(k/32)].
  const int8_t* xq = nullptr;
  const int32_t* xsum = nullptr;
  const float* xscale = nullptr;
  // gemm_w4a8: 14-bit activations [m, ldx] (scales in xscale), with what its table's
  // prepare_w4a8 wrote besides: planes [m, 2 * ldx] here, sums in xsum.
  const int16_t* xh = nullptr;
  const int8_t* xhb = nullptr;
  // Output column n lands at y[row * ldy + n - y_col0]: a caller that keeps only a slice of
  // the columns (the fused gmm1's tiles) passes the slice's first column.
  int64_t y_col0 = 0;
};

struct MxGemmKernels {
  IsaLevel isa;
  const char* name;
  // Packs weights at load into the layout this table's kernels read: pack_mx_weights's
  // panels for the scalar and AVX2 tables, pack_mx_weights_avx512's for AVX-512.
  MxPanelWeights (*pack)(const MxMatrixView& w);
  // mx_decode_activations, bit for bit.
  void (*decode)(const MxMatrixView& a, float* af, float factor);
  // W4A8's activations: q and scales are mx_prepare_fp8_activations_i16's, bit for bit;
  // planes [rows, 2 * mx_decoded_stride(k)] and sums [rows, ceil(k/32)] whatever else this
  // table's gemm_w4a8 reads (the scalar table reads neither).
  void (*prepare_w4a8)(const MxMatrixView& a, int16_t* q, int8_t* planes, int32_t* sums,
                       float* scales);
  // Columns [n_begin, n_end) of y; n_begin is a multiple of kMxPanelCols. E4M3 weights.
  void (*gemm)(const MxGemmArgs& a, int64_t n_begin, int64_t n_end);
  // E2M1 weights times integer E2M1 activations: per block an exact integer dot, then scaled
  // and accumulated in FP32.
  void (*gemm_w4a4)(const MxGemmArgs& a, int64_t n_begin, int64_t n_end);
  // E2M1 weights times 14-bit E4M3 activations (prepare_w4a8's): per block an exact integer
  // dot, then scaled and accumulated in FP32 as gemm_w4a4 does.
  void (*gemm_w4a8)(const MxGemmArgs& a, int64_t n_begin, int64_t n_end);
};
// The table a level runs on this processor (at AVX-512, the E4M3 variant it prefers), null where
// it lacks the level.
const MxGemmKernels* mx_gemm_kernels_for(IsaLevel level);
const MxGemmKernels& mx_gemm_kernels();
// Every table this processor can run, the variants that mx_gemm_kernels_for passes over
// included (for tests and benchmarks).
std::vector<const MxGemmKernels*> mx_gemm_kernel_variants();

// AVX-512's own panels (mx_gemm_avx512.cpp reads them): the same blocks, scales and post
// factor as pack_mx_weights, with column c in dword lane c of each 64-byte row; an E4M3 row j
// holds k = 4j + t in byte t, an E2M1 row j k = 8j + i in the low nibble of byte i and
// 8j + 4 + i in its high nibble.
MxPanelWeights pack_mx_weights_avx512(const MxMatrixView& w);
// The same but for E4M3, whose rows feed BF16 dot products (mx_gemm_avx512_fp8.cpp): row j
// holds k = 4j .. 4j + 3, column 4L + i of quarter L at bytes 16L + 2i + 1 (k = 4j), 16L + 2i
// (4j + 1), 16L + 8 + 2i + 1 (4j + 2) and 16L + 8 + 2i (4j + 3).
MxPanelWeights pack_mx_weights_avx512_bf16(const MxMatrixView& w);

namespace mx_gemm_detail {
// The byte planes that the AVX2 table's prepare_w4a8 writes (read by AVX2's one-row W4A8 tiles
// and by AVX-512's W4A8 tiles at every row count): each 14-bit value x = kW4a8PlaneSplit * h
// + l with h and l in [-85, 85] (|x| <= 448 * 32), a split for which both halves keep a
// block's byte products in 16-bit lanes (16 products of at most 24 * 85 = 32640).
constexpr int kW4a8PlaneSplit = 170;
// For a one-row integer GEMM (E2M1 weights): exp[b], for each of a's nb blocks, such that a
// stored scale byte s plus exp[b] is the FP32 exponent field of (2^(s - 127) * 2^(64 - f)) *
// a.xscale[b] * 2^shift, for every s of the weights, with that product and its first factor
// normal. Then a kernel may build a block's scale vector with an add and a shift, and its
// results are those of the multiplies. False (exp unspecified) where that does not hold: chunk
// scales, an activation scale not a normal power of two, scales out of range, or more than
// max_blocks blocks.
bool mx_one_row_scale_exps(const MxGemmArgs& a, int shift, int32_t* exp, int64_t max_blocks);
extern const MxGemmKernels kScalarMxGemm;
extern const MxGemmKernels kAvx2MxGemm;
extern const MxGemmKernels kAvx512MxGemm;
// AVX-512 with AMX tiles for the integer GEMMs (mx_gemm_amx.cpp).
extern const MxGemmKernels kAmxMxGemm;
// The AVX-512 variant whose E4M3 GEMM runs on AVX512-BF16 dot products (mx_gemm_avx512_fp8.cpp);
// its integer GEMMs are the AVX-512 table's.
extern const MxGemmKernels kAvx512Bf16MxGemm;
void gemm_w4a4_avx512(const MxGemmArgs& a, int64_t n_begin, int64_t n_end);
void gemm_w4a8_avx512(const MxGemmArgs& a, int64_t n_begin, int64_t n_end);
// The AVX2 table's activation preparation, which the AVX-512 table shares.
void decode_avx2(const MxMatrixView& a, float* af, float factor);
void prepare_w4a8_avx2(const MxMatrixView& a, int16_t* q, int8_t* planes, int32_t* sums,
                       float* scales);
}  // namespace mx_gemm_detail

}  // namespace mx
