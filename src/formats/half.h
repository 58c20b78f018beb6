// BF16 and FP16 codecs. Inline because activation and weight paths call them per element.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace mx {

inline float bf16_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// Round-to-nearest-even; NaN stays NaN (quieted), Inf stays Inf.
inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

float fp16_to_float(uint16_t h);
// Round-to-nearest-even with IEEE overflow to Inf and gradual underflow.
uint16_t float_to_fp16(float f);

}  // namespace mx
