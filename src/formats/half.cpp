#include "formats/half.h"

namespace mx {

float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    mag = man == 0 ? INFINITY : NAN;
  } else {
    mag = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
}

uint16_t float_to_fp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7E00u;
  if (a >= 65520.0f) return sign | 0x7C00u;  // rounds past the max finite 65504
  if (a < 0x1p-14f) {
    // Subnormal: quantum 2^-24; nearbyint rounds half to even.
    const auto m = static_cast<uint32_t>(std::nearbyint(std::ldexp(a, 24)));
    return sign | static_cast<uint16_t>(m);  // m == 0x400 is the smallest normal, as wanted
  }
  const uint32_t au = std::bit_cast<uint32_t>(a);
  uint32_t r = au + 0xFFFu + ((au >> 13) & 1u);
  r = (r >> 13) - ((127u - 15u) << 10);
  return sign | static_cast<uint16_t>(r);
}

}  // namespace mx
