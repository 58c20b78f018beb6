// Exhaustive checks of the element and scale codecs against formulas written out here.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "formats/half.h"
#include "formats/minifloat.h"
#include "formats/mx_block.h"

namespace mx {
namespace {

// Value of a code from its bit fields, computed independently of the codec's tables.
double formula_value(int ebits, int mbits, int bias, uint32_t code) {
  const int total = 1 + ebits + mbits;
  const bool neg = (code >> (total - 1)) & 1;
  const int e = static_cast<int>((code >> mbits) & ((1u << ebits) - 1));
  const int m = static_cast<int>(code & ((1u << mbits) - 1));
  const double frac = static_cast<double>(m) / static_cast<double>(1 << mbits);
  const double v = e == 0 ? frac * std::pow(2.0, 1 - bias) : (1.0 + frac) * std::pow(2.0, e - bias);
  return neg ? -v : v;
}

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(Codec, E4M3EveryCodeDecodesExactly) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << c;
      continue;
    }
    EXPECT_TRUE(same_bits(v, static_cast<float>(formula_value(4, 3, 7, c)))) << c;
  }
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
}

TEST(Codec, E5M2EveryCodeDecodesExactly) {
  for (uint32_t c = 0; c < 256; ++c) {
    const float v = e5m2_to_float(static_cast<uint8_t>(c));
    const uint32_t exp = (c >> 2) & 0x1F;
    if (exp == 31) {
      if ((c & 3) == 0) {
        EXPECT_TRUE(std::isinf(v)) << c;
        EXPECT_EQ(std::signbit(v), (c & 0x80) != 0);
      } else {
        EXPECT_TRUE(std::isnan(v)) << c;
      }
      continue;
    }
    EXPECT_TRUE(same_bits(v, static_cast<float>(formula_value(5, 2, 15, c)))) << c;
  }
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_float(0x01), std::ldexp(1.0f, -16));
}

TEST(Codec, E2M1EveryCodeDecodesExactly) {
  const float expect[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint32_t c = 0; c < 16; ++c) {
    const float v = e2m1_to_float(static_cast<uint8_t>(c));
    EXPECT_TRUE(same_bits(v, (c & 8) ? -expect[c & 7] : expect[c & 7])) << c;
  }
}

TEST(Codec, E8M0EveryCodeDecodesExactly) {
  for (int b = 0; b < 255; ++b) {
    EXPECT_EQ(e8m0_to_float(static_cast<uint8_t>(b)), static_cast<float>(std::pow(2.0, b - 127)))
        << b;
  }
  EXPECT_EQ(std::bit_cast<uint32_t>(e8m0_to_float(0)), 0x00400000u);
  EXPECT_TRUE(std::isnan(e8m0_to_float(0xFF)));
}

void expect_round_trip(ElemFormat f, int codes) {
  for (int c = 0; c < codes; ++c) {
    const float v = elem_decode(f, static_cast<uint8_t>(c));
    if (std::isnan(v) || std::isinf(v)) continue;
    EXPECT_EQ(elem_encode(f, v), c) << elem_info(f).name << " code " << c;
  }
}

TEST(Codec, RepresentableValuesRoundTrip) {
  expect_round_trip(ElemFormat::kE4M3, 256);
  expect_round_trip(ElemFormat::kE5M2, 256);
  expect_round_trip(ElemFormat::kE2M1, 16);
}

// Every midpoint between neighbouring finite positive values rounds to the one with an even
// mantissa (even code); a hair either side rounds to the nearer neighbour.
void expect_ties_to_even(ElemFormat f, int max_code) {
  for (int c = 0; c < max_code; ++c) {
    const double lo = elem_decode(f, static_cast<uint8_t>(c));
    const double hi = elem_decode(f, static_cast<uint8_t>(c + 1));
    const double mid = (lo + hi) / 2;
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(elem_encode(f, mid), even) << elem_info(f).name << " tie above code " << c;
    EXPECT_EQ(elem_encode(f, std::nextafter(mid, 0.0)), c);
    EXPECT_EQ(elem_encode(f, std::nextafter(mid, 1e9)), c + 1);
    // Negative side mirrors it with the sign bit.
    const int sign = f == ElemFormat::kE2M1 ? 0x8 : 0x80;
    EXPECT_EQ(elem_encode(f, -mid), even | sign);
  }
}

TEST(Codec, TiesGoToEven) {
  expect_ties_to_even(ElemFormat::kE4M3, 0x7E);
  expect_ties_to_even(ElemFormat::kE5M2, 0x7B);
  expect_ties_to_even(ElemFormat::kE2M1, 7);
}

TEST(Codec, Saturation) {
  EXPECT_EQ(float_to_e4m3(449.0), 0x7E);
  EXPECT_EQ(float_to_e4m3(464.0), 0x7E);  // the tie above max would round up: saturates
  EXPECT_EQ(float_to_e4m3(1e30), 0x7E);
  EXPECT_EQ(float_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(float_to_e5m2(61440.0), 0x7B);
  EXPECT_EQ(float_to_e5m2(INFINITY), 0x7B);
  EXPECT_EQ(float_to_e2m1(7.0), 0x7);
  EXPECT_EQ(float_to_e2m1(-100.0), 0xF);
  EXPECT_EQ(float_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(float_to_e4m3(-0.0), 0x80);
  EXPECT_EQ(float_to_e2m1(-0.1), 0x8);  // rounds to zero, keeps the sign
  // Below half the smallest subnormal rounds to zero; exactly half is a tie to even (zero).
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0, -10)), 0x00);
  EXPECT_EQ(float_to_e4m3(std::nextafter(std::ldexp(1.0, -10), 1.0)), 0x01);
}

TEST(Codec, Fp16MatchesCompilerConversion) {
  // _Float16 conversions come from the compiler runtime, not from the code under test.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    _Float16 hf = std::bit_cast<_Float16>(static_cast<uint16_t>(h));
    const float ref = static_cast<float>(hf);
    const float got = fp16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(got));
    } else {
      ASSERT_TRUE(same_bits(ref, got)) << h;
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(bits(rng));
    if (std::isnan(f)) continue;
    const uint16_t ref = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(float_to_fp16(f), ref) << f;
  }
}

TEST(Codec, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to the even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3F82);  // halfway, rounds up to even
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3F81);
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), h);
    }
  }
}

// BF16 rounded to odd keeps what MX requantization sees: random blocks of FP32 spread over
// many binades quantize to the same E8M0 scale and codes (E4M3 and E2M1, both scale rules)
// from their round-to-odd BF16 values as from themselves. Round-to-nearest-even does not:
// the test counts how often it changes a code, to show the property is not vacuous.
TEST(Codec, Bf16RoundToOddKeepsMxRequantization) {
  EXPECT_EQ(float_to_bf16_odd(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16_odd(1.0f + 0x1p-8f), 0x3F81);  // inexact: odd
  EXPECT_EQ(float_to_bf16_odd(-(1.0f + 0x1p-20f)), 0xBF81);
  EXPECT_EQ(float_to_bf16_odd(INFINITY), 0x7F80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16_odd(NAN))));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-30, 30);
  int rne_changes = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    float x[32], odd[32], rne[32];
    const int base = exp(rng);
    for (int i = 0; i < 32; ++i) {
      x[i] = std::ldexp(mant(rng), base - (i % 7));
      odd[i] = bf16_to_float(float_to_bf16_odd(x[i]));
      rne[i] = bf16_to_float(float_to_bf16(x[i]));
    }
    for (ElemFormat f : {ElemFormat::kE4M3, ElemFormat::kE2M1}) {
      for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kRceil}) {
        uint8_t c0[32], c1[32], c2[32], s0, s1, s2;
        mx_quantize_block(x, 32, f, rule, c0, &s0);
        mx_quantize_block(odd, 32, f, rule, c1, &s1);
        mx_quantize_block(rne, 32, f, rule, c2, &s2);
        ASSERT_EQ(s0, s1) << "trial " << trial;
        for (int i = 0; i < 32; ++i) ASSERT_EQ(c0[i], c1[i]) << "trial " << trial << " i " << i;
        rne_changes += s0 != s2;
        for (int i = 0; i < 32; ++i) rne_changes += c0[i] != c2[i];
      }
    }
  }
  EXPECT_GT(rne_changes, 100);
}

}  // namespace
}  // namespace mx
