#include "formats/mx_types.h"

#include <array>
#include <vector>

#include "formats/mx_layout.h"

namespace mx {
namespace {

template <ElemFormat F>
void quantize_fp8(const float* x, int64_t k, ScaleRule rule, uint8_t* data, uint8_t* scales) {
  mx_quantize_row(x, k, F, rule, data, scales);
}
template <ElemFormat F>
void dequantize_fp8(const uint8_t* data, const uint8_t* scales, int64_t k, float* out) {
  mx_dequantize_row(data, scales, k, F, out);
}
void quantize_fp4(const float* x, int64_t k, ScaleRule rule, uint8_t* data, uint8_t* scales) {
  std::vector<uint8_t> codes(static_cast<size_t>(k));
  mx_quantize_row(x, k, ElemFormat::kE2M1, rule, codes.data(), scales);
  fp4_pack(codes.data(), k, Fp4Order::kAdjacent, data);
}
void dequantize_fp4(const uint8_t* data, const uint8_t* scales, int64_t k, float* out) {
  std::vector<uint8_t> codes(static_cast<size_t>(k));
  fp4_unpack(data, k, Fp4Order::kAdjacent, codes.data());
  mx_dequantize_row(codes.data(), scales, k, ElemFormat::kE2M1, out);
}

constexpr std::array<MxTypeInfo, 3> kTypes = {{
    {MxType::kMxfp8E4M3, "mxfp8_e4m3", ElemFormat::kE4M3, 32, 33, quantize_fp8<ElemFormat::kE4M3>,
     dequantize_fp8<ElemFormat::kE4M3>, MxType::kMxfp8E4M3},
    {MxType::kMxfp8E5M2, "mxfp8_e5m2", ElemFormat::kE5M2, 32, 33, quantize_fp8<ElemFormat::kE5M2>,
     dequantize_fp8<ElemFormat::kE5M2>, MxType::kMxfp8E4M3},
    {MxType::kMxfp4, "mxfp4", ElemFormat::kE2M1, 32, 17, quantize_fp4, dequantize_fp4,
     MxType::kMxfp8E4M3},
}};

}  // namespace

const MxTypeInfo& mx_type_info(MxType type) { return kTypes[static_cast<size_t>(type)]; }

std::optional<MxType> mx_type_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    if (t.name == name) return t.type;
  }
  return std::nullopt;
}

int64_t mx_row_bytes(MxType type, int64_t k) {
  return type == MxType::kMxfp4 ? fp4_packed_bytes(k) : k;
}

}  // namespace mx
