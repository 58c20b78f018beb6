// One row per MX data type: name, block geometry, reference row codecs and the activation
// type a weight of this type is multiplied with by default.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "formats/minifloat.h"
#include "formats/mx_block.h"

namespace mx {

enum class MxType : uint8_t { kMxfp8E4M3, kMxfp8E5M2, kMxfp4 };

struct MxTypeInfo {
  MxType type;
  std::string_view name;
  ElemFormat elem;
  int block_size;       // elements per shared scale
  int bytes_per_block;  // element bytes + 1 scale byte
  // Row codecs on this type's storage: data is k bytes (FP8) or ceil(k/2) bytes (FP4,
  // adjacent nibbles); scales ceil(k/32) E8M0 bytes.
  void (*quantize_row)(const float* x, int64_t k, ScaleRule rule, uint8_t* data, uint8_t* scales);
  void (*dequantize_row)(const uint8_t* data, const uint8_t* scales, int64_t k, float* out);
  MxType activation_companion;
};

const MxTypeInfo& mx_type_info(MxType type);
std::optional<MxType> mx_type_from_name(std::string_view name);
// Bytes of a quantized row of k elements (data only, scales apart).
int64_t mx_row_bytes(MxType type, int64_t k);

}  // namespace mx
