// Element formats of the MX types (E4M3, E5M2, E2M1) and the E8M0 scale: exact decode of
// every code and exact encode with round-to-nearest-even and saturation to the format's max.
#pragma once

#include <cstdint>
#include <string_view>

namespace mx {

enum class ElemFormat : uint8_t { kE4M3, kE5M2, kE2M1 };

struct ElemFormatInfo {
  ElemFormat format;
  std::string_view name;
  int ebits;
  int mbits;
  int bias;
  int emax;          // exponent of the largest normal: the MX scale rule subtracts it
  float max;         // largest finite magnitude
  uint8_t nan_code;  // what a NaN input encodes to (E2M1 has none: 0)
  int bits;          // ebits + mbits + 1
};

const ElemFormatInfo& elem_info(ElemFormat format);

// Exact value of a code; NaN codes decode to NaN, E5M2's Inf codes to Inf. For E2M1 only the
// low 4 bits are read.
float elem_decode(ElemFormat format, uint8_t code);
// Round-to-nearest-even onto the format's grid, subnormals included; magnitudes beyond the
// max (Inf too) saturate to +-max; NaN gives nan_code. The sign of zero is kept.
uint8_t elem_encode(ElemFormat format, double value);

inline float e4m3_to_float(uint8_t c) { return elem_decode(ElemFormat::kE4M3, c); }
inline float e5m2_to_float(uint8_t c) { return elem_decode(ElemFormat::kE5M2, c); }
inline float e2m1_to_float(uint8_t c) { return elem_decode(ElemFormat::kE2M1, c); }
inline uint8_t float_to_e4m3(double v) { return elem_encode(ElemFormat::kE4M3, v); }
inline uint8_t float_to_e5m2(double v) { return elem_encode(ElemFormat::kE5M2, v); }
inline uint8_t float_to_e2m1(double v) { return elem_encode(ElemFormat::kE2M1, v); }

// Decode tables, 256 entries (E2M1: 16), for hot loops that want a lookup.
const float* e4m3_table();
const float* e5m2_table();
const float* e2m1_table();

// E8M0 scale byte: 2^(byte - 127); 0xFF is NaN; byte 0 is 2^-127 (an FP32 subnormal).
constexpr uint8_t kE8M0Nan = 0xFF;
float e8m0_to_float(uint8_t byte);
inline int e8m0_exponent(uint8_t byte) { return static_cast<int>(byte) - 127; }
// Exponent in [-127, 127] to its byte.
inline uint8_t e8m0_from_exponent(int e) { return static_cast<uint8_t>(e + 127); }

}  // namespace mx
