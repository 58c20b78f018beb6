#include "formats/minifloat.h"

#include <array>
#include <cmath>
#include <limits>

namespace mx {
namespace {

constexpr std::array<ElemFormatInfo, 3> kFormats = {{
    {ElemFormat::kE4M3, "e4m3", 4, 3, 7, 8, 448.0f, 0x7F, 8},
    {ElemFormat::kE5M2, "e5m2", 5, 2, 15, 15, 57344.0f, 0x7F, 8},
    {ElemFormat::kE2M1, "e2m1", 2, 1, 1, 2, 6.0f, 0x00, 4},
}};

float decode_slow(const ElemFormatInfo& f, uint8_t code) {
  const int sign_shift = f.bits - 1;
  const bool neg = (code >> sign_shift) & 1;
  const int exp = (code >> f.mbits) & ((1 << f.ebits) - 1);
  const int man = code & ((1 << f.mbits) - 1);
  const int exp_all_ones = (1 << f.ebits) - 1;
  float mag;
  if (f.format == ElemFormat::kE4M3 && exp == exp_all_ones && man == (1 << f.mbits) - 1) {
    mag = std::numeric_limits<float>::quiet_NaN();
  } else if (f.format == ElemFormat::kE5M2 && exp == exp_all_ones) {
    mag =
        man == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = std::ldexp(static_cast<float>(man), 1 - f.bias - f.mbits);
  } else {
    mag = std::ldexp(static_cast<float>(man + (1 << f.mbits)), exp - f.bias - f.mbits);
  }
  return neg ? -mag : mag;
}

template <size_t N>
std::array<float, N> make_table(ElemFormat format) {
  std::array<float, N> t{};
  for (size_t i = 0; i < N; ++i) t[i] = decode_slow(elem_info(format), static_cast<uint8_t>(i));
  return t;
}

const std::array<float, 256>& e4m3_tab() {
  static const auto t = make_table<256>(ElemFormat::kE4M3);
  return t;
}
const std::array<float, 256>& e5m2_tab() {
  static const auto t = make_table<256>(ElemFormat::kE5M2);
  return t;
}
const std::array<float, 16>& e2m1_tab() {
  static const auto t = make_table<16>(ElemFormat::kE2M1);
  return t;
}

}  // namespace

const ElemFormatInfo& elem_info(ElemFormat format) { return kFormats[static_cast<size_t>(format)]; }

const float* e4m3_table() { return e4m3_tab().data(); }
const float* e5m2_table() { return e5m2_tab().data(); }
const float* e2m1_table() { return e2m1_tab().data(); }

float elem_decode(ElemFormat format, uint8_t code) {
  switch (format) {
    case ElemFormat::kE4M3:
      return e4m3_tab()[code];
    case ElemFormat::kE5M2:
      return e5m2_tab()[code];
    case ElemFormat::kE2M1:
      return e2m1_tab()[code & 0xF];
  }
  return 0.0f;
}

uint8_t elem_encode(ElemFormat format, double value) {
  const ElemFormatInfo& f = elem_info(format);
  const uint8_t sign = std::signbit(value) ? static_cast<uint8_t>(1u << (f.bits - 1)) : 0;
  if (std::isnan(value)) return f.nan_code | (format == ElemFormat::kE2M1 ? 0 : sign);
  const int emin = 1 - f.bias;  // exponent of the smallest normal
  const double max = f.max;
  double a = std::fabs(value);
  int field_exp;
  int man;
  if (a >= max) {
    a = max;
  } else {
    int e2;
    std::frexp(a, &e2);  // a = m * 2^e2, m in [0.5, 1): floor(log2 a) = e2 - 1
    const int e = a == 0.0 ? emin : std::max(e2 - 1, emin);
    const double quantum = std::ldexp(1.0, e - f.mbits);
    a = std::nearbyint(a / quantum) * quantum;  // default rounding mode: half to even
    if (a > max) a = max;
  }
  if (a < std::ldexp(1.0, emin)) {
    field_exp = 0;
    man = static_cast<int>(std::ldexp(a, f.mbits - emin));
  } else {
    int e2;
    const double m = std::frexp(a, &e2);  // a = m * 2^e2
    field_exp = e2 - 1 + f.bias;
    man = static_cast<int>(std::ldexp(m * 2.0 - 1.0, f.mbits));
  }
  return sign | static_cast<uint8_t>((field_exp << f.mbits) | man);
}

float e8m0_to_float(uint8_t byte) {
  if (byte == kE8M0Nan) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(byte) - 127);
}

}  // namespace mx
