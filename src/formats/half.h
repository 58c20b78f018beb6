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

// Round-to-odd: truncated, with the last bit set when anything was cut. A value rounded to
// odd with at least two bits more than a narrower format then rounds to nearest even in that
// format exactly as the original would (BF16's 8 significant bits against E4M3's 4 and
// E2M1's 2), and comparisons against BF16 values keep their outcome, so E8M0 block scales are
// unchanged too. NaN stays NaN, Inf stays Inf.
inline uint16_t float_to_bf16_odd(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u >> 16) | ((u & 0xFFFFu) != 0 ? 1u : 0u));
}

inline float round_to_bf16(float f) { return bf16_to_float(float_to_bf16(f)); }

float fp16_to_float(uint16_t h);
// Round-to-nearest-even with IEEE overflow to Inf and gradual underflow.
uint16_t float_to_fp16(float f);

}  // namespace mx
