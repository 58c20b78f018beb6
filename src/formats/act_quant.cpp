#include "formats/act_quant.h"

#include <algorithm>

#include "core/isa_table.h"
#include "formats/half.h"
#include "formats/mx_block.h"
#include "formats/mx_layout.h"

namespace mx {
namespace act_quant_detail {

void block_f32_to_mxfp8(const float* x, int n, ScaleRule rule, uint8_t* codes, uint8_t* scale) {
  mx_quantize_block(x, n, ElemFormat::kE4M3, rule, codes, scale);
}

void block_bf16_to_mxfp8(const uint16_t* x, int n, ScaleRule rule, uint8_t* codes, uint8_t* scale) {
  float f[kMxBlock];
  for (int i = 0; i < n; ++i) f[i] = bf16_to_float(x[i]);
  mx_quantize_block(f, n, ElemFormat::kE4M3, rule, codes, scale);
}

void block_f32_to_mxfp4(const float* x, int n, ScaleRule rule, uint8_t* packed, uint8_t* scale) {
  uint8_t codes[kMxBlock];
  mx_quantize_block(x, n, ElemFormat::kE2M1, rule, codes, scale);
  fp4_pack(codes, n, Fp4Order::kAdjacent, packed);
}

void block_bf16_to_mxfp4(const uint16_t* x, int n, ScaleRule rule, uint8_t* packed,
                         uint8_t* scale) {
  float f[kMxBlock];
  for (int i = 0; i < n; ++i) f[i] = bf16_to_float(x[i]);
  block_f32_to_mxfp4(f, n, rule, packed, scale);
}

namespace {

template <typename T, void (*Block)(const T*, int, ScaleRule, uint8_t*, uint8_t*), int kDiv>
void row_by_blocks(const T* x, int64_t k, ScaleRule rule, uint8_t* out, uint8_t* scales) {
  for (int64_t b = 0; b * kMxBlock < k; ++b) {
    const int n = static_cast<int>(std::min<int64_t>(kMxBlock, k - b * kMxBlock));
    Block(x + b * kMxBlock, n, rule, out + b * kMxBlock / kDiv, scales + b);
  }
}

}  // namespace

const ActQuantKernels kScalarKernels = {
    IsaLevel::kScalar,
    row_by_blocks<float, block_f32_to_mxfp8, 1>,
    row_by_blocks<uint16_t, block_bf16_to_mxfp8, 1>,
    row_by_blocks<float, block_f32_to_mxfp4, 2>,
    row_by_blocks<uint16_t, block_bf16_to_mxfp4, 2>,
};

}  // namespace act_quant_detail

namespace {
constexpr IsaTable<ActQuantKernels> kActQuantKernelsTable{&act_quant_detail::kScalarKernels,
                                                          &act_quant_detail::kAvx2Kernels,
                                                          &act_quant_detail::kAvx512Kernels};
}  // namespace

const ActQuantKernels* act_quant_kernels_for(IsaLevel level) {
  return kActQuantKernelsTable.at(level);
}

const ActQuantKernels& act_quant_kernels() {
  static const ActQuantKernels& k = kActQuantKernelsTable.select();
  return k;
}

}  // namespace mx
