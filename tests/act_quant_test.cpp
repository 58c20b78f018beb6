// The generic kernel test for activation quantization: every registered ISA variant against
// the scalar reference on odd shapes, both scale rules, FP32 and BF16 input, special values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "formats/act_quant.h"
#include "formats/half.h"
#include "formats/mx_block.h"
#include "formats/mx_layout.h"
#include "test_util.h"

namespace mx {
namespace {

struct Reference {
  std::vector<uint8_t> fp8, fp8_scales, fp4, fp4_scales;
};

// Independent of the kernel table: mx_quantize_row plus packing.
Reference reference(const std::vector<float>& x, ScaleRule rule) {
  const int64_t k = static_cast<int64_t>(x.size());
  Reference r;
  r.fp8.resize(x.size());
  r.fp8_scales.resize(static_cast<size_t>(mx_num_blocks(k)));
  mx_quantize_row(x.data(), k, ElemFormat::kE4M3, rule, r.fp8.data(), r.fp8_scales.data());
  std::vector<uint8_t> codes(x.size());
  r.fp4_scales.resize(r.fp8_scales.size());
  mx_quantize_row(x.data(), k, ElemFormat::kE2M1, rule, codes.data(), r.fp4_scales.data());
  r.fp4.resize(static_cast<size_t>(fp4_packed_bytes(k)));
  fp4_pack(codes.data(), k, Fp4Order::kAdjacent, r.fp4.data());
  return r;
}

std::vector<float> make_input(int64_t k, uint32_t seed) {
  auto x = test::activation_like(static_cast<size_t>(k), seed);
  // Blocks that must take the careful path: all zero, FP32 subnormal amax, Inf, NaN.
  if (k >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
  if (k >= 96)
    for (int i = 64; i < 96; ++i) x[i] = std::ldexp(static_cast<float>(i), -140);
  if (k >= 128) x[100] = INFINITY;
  if (k >= 160) x[130] = NAN;
  // Values near the subnormal/normal edges of both element formats and the E4M3 max.
  if (k >= 192)
    for (int i = 160; i < 192; ++i) x[i] = std::ldexp(1.0f + (i % 8) / 8.0f, (i % 12) - 10);
  return x;
}

TEST(ActQuant, EveryVariantMatchesTheReference) {
  const int64_t ks[] = {1, 17, 31, 32, 33, 47, 64, 97, 240, 688, 2048, 4304};
  int variants = 0;
  for (IsaLevel isa : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    const ActQuantKernels* kern = act_quant_kernels_for(isa);
    if (kern == nullptr) {
      std::printf("act_quant: %s not supported on this CPU, skipped\n",
                  std::string(isa_name(isa)).c_str());
      continue;
    }
    ++variants;
    for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kRceil}) {
      for (int64_t k : ks) {
        for (int input = 0; input < 2; ++input) {
          const uint32_t seed = static_cast<uint32_t>(k * 7 + input);
          auto x = make_input(k, seed);
          std::vector<uint16_t> xb(x.size());
          if (input == 1) {
            for (size_t i = 0; i < x.size(); ++i) {
              xb[i] = float_to_bf16(x[i]);
              x[i] = bf16_to_float(xb[i]);
            }
          }
          const Reference ref = reference(x, rule);
          std::vector<uint8_t> fp8(ref.fp8.size()), s8(ref.fp8_scales.size());
          std::vector<uint8_t> fp4(ref.fp4.size()), s4(ref.fp4_scales.size());
          if (input == 0) {
            kern->f32_to_mxfp8(x.data(), k, rule, fp8.data(), s8.data());
            kern->f32_to_mxfp4(x.data(), k, rule, fp4.data(), s4.data());
          } else {
            kern->bf16_to_mxfp8(xb.data(), k, rule, fp8.data(), s8.data());
            kern->bf16_to_mxfp4(xb.data(), k, rule, fp4.data(), s4.data());
          }
          const std::string what = std::string(isa_name(isa)) + " k=" + std::to_string(k) +
                                   " rule=" + std::string(scale_rule_name(rule)) +
                                   (input ? " bf16" : " f32") + " seed=" + std::to_string(seed);
          EXPECT_EQ(s8, ref.fp8_scales) << what;
          EXPECT_EQ(fp8, ref.fp8) << what;
          EXPECT_EQ(s4, ref.fp4_scales) << what;
          EXPECT_EQ(fp4, ref.fp4) << what;
        }
      }
    }
  }
  EXPECT_GE(variants, 1);
}

// Exhaustive over BF16 inputs: every finite BF16 value, placed beside a pin that fixes the
// block scale, converts exactly as the reference does.
TEST(ActQuant, EveryBf16ValueBesidePins) {
  for (IsaLevel isa : {IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    const ActQuantKernels* kern = act_quant_kernels_for(isa);
    if (kern == nullptr) continue;
    for (float pin : {448.0f, 6.0f, 1.0f, 0x1p-100f}) {
      std::vector<uint16_t> xb;
      for (uint32_t h = 0; h < 0x10000; ++h) {
        const float v = bf16_to_float(static_cast<uint16_t>(h));
        if (!std::isfinite(v) || std::fabs(v) > pin) continue;
        if (xb.size() % 32 == 0) xb.push_back(float_to_bf16(pin));
        xb.push_back(static_cast<uint16_t>(h));
      }
      while (xb.size() % 32 != 0) xb.push_back(0);
      std::vector<float> x(xb.size());
      for (size_t i = 0; i < x.size(); ++i) x[i] = bf16_to_float(xb[i]);
      const int64_t k = static_cast<int64_t>(x.size());
      const Reference ref = reference(x, ScaleRule::kFloor);
      std::vector<uint8_t> fp8(ref.fp8.size()), s8(ref.fp8_scales.size());
      std::vector<uint8_t> fp4(ref.fp4.size()), s4(ref.fp4_scales.size());
      kern->bf16_to_mxfp8(xb.data(), k, ScaleRule::kFloor, fp8.data(), s8.data());
      kern->bf16_to_mxfp4(xb.data(), k, ScaleRule::kFloor, fp4.data(), s4.data());
      ASSERT_EQ(s8, ref.fp8_scales) << isa_name(isa) << " pin " << pin;
      ASSERT_EQ(fp8, ref.fp8) << isa_name(isa) << " pin " << pin;
      ASSERT_EQ(s4, ref.fp4_scales) << isa_name(isa) << " pin " << pin;
      ASSERT_EQ(fp4, ref.fp4) << isa_name(isa) << " pin " << pin;
    }
  }
}

TEST(ActQuant, ActiveTableIsTheBestSupported) {
  const ActQuantKernels& k = act_quant_kernels();
  // No AMX table here: at that level the AVX-512 one runs.
  EXPECT_EQ(k.isa, std::min(active_isa(), IsaLevel::kAvx512));
}

}  // namespace
}  // namespace mx
