// MX block quantization: scale selection, partial blocks, error bounds, dual level, layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "formats/half.h"
#include "formats/mx_block.h"
#include "formats/mx_layout.h"
#include "test_util.h"

namespace mx {
namespace {

uint8_t scale_of(std::vector<float> x, ElemFormat f, ScaleRule rule = ScaleRule::kFloor) {
  std::vector<uint8_t> codes(x.size());
  uint8_t s = 0;
  mx_quantize_block(x.data(), static_cast<int>(x.size()), f, rule, codes.data(), &s);
  return s;
}

TEST(MxScale, PowerOfTwoBoundaries) {
  // E4M3 emax is 8: amax 2^k gives 2^(k-8); just below drops one, just above stays.
  for (int k = -100; k <= 100; k += 7) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(scale_of({p, 0.5f * p}, ElemFormat::kE4M3), 127 + k - 8) << k;
    EXPECT_EQ(scale_of({std::nextafter(p, 0.0f)}, ElemFormat::kE4M3), 127 + k - 9) << k;
    EXPECT_EQ(scale_of({std::nextafter(p, INFINITY)}, ElemFormat::kE4M3), 127 + k - 8) << k;
    EXPECT_EQ(scale_of({-p}, ElemFormat::kE2M1), 127 + k - 2) << k;
  }
}

TEST(MxScale, ZeroSubnormalAndNonFinite) {
  EXPECT_EQ(scale_of({0.0f, -0.0f}, ElemFormat::kE4M3), 0);
  // FP32 subnormal amax: true exponent, then the clamp at -127.
  EXPECT_EQ(scale_of({std::ldexp(1.0f, -140)}, ElemFormat::kE4M3), 0);
  EXPECT_EQ(scale_of({std::ldexp(1.0f, -120)}, ElemFormat::kE2M1), 127 - 122);
  EXPECT_EQ(scale_of({1.0f, INFINITY}, ElemFormat::kE4M3), 0xFF);
  EXPECT_EQ(scale_of({NAN, 1.0f}, ElemFormat::kE2M1), 0xFF);
}

TEST(MxScale, RceilNeverSaturatesAndDiffersByAtMostOne) {
  const auto x = test::activation_like(32 * 400, 11);
  for (ElemFormat f : {ElemFormat::kE4M3, ElemFormat::kE5M2, ElemFormat::kE2M1}) {
    for (size_t b = 0; b < 400; ++b) {
      std::vector<float> blk(x.begin() + 32 * b, x.begin() + 32 * (b + 1));
      const int fl = scale_of(blk, f, ScaleRule::kFloor);
      const int rc = scale_of(blk, f, ScaleRule::kRceil);
      if (fl == 0) continue;
      EXPECT_TRUE(rc == fl || rc == fl + 1);
      float amax = 0;
      for (float v : blk) amax = std::max(amax, std::fabs(v));
      // With the rceil scale the largest element fits under the format's max.
      EXPECT_LE(amax / e8m0_to_float(static_cast<uint8_t>(rc)), elem_info(f).max);
    }
  }
}

TEST(MxQuant, E4M3ErrorBoundAndLargestElement) {
  const auto x = test::activation_like(32 * 1000 + 17, 3);
  const int64_t k = static_cast<int64_t>(x.size());
  std::vector<uint8_t> codes(x.size()), scales(static_cast<size_t>(mx_num_blocks(k)));
  std::vector<float> y(x.size());
  mx_quantize_row(x.data(), k, ElemFormat::kE4M3, ScaleRule::kFloor, codes.data(), scales.data());
  mx_dequantize_row(codes.data(), scales.data(), k, ElemFormat::kE4M3, y.data());
  for (int64_t i = 0; i < k; ++i) {
    const double scale = e8m0_to_float(scales[static_cast<size_t>(i / 32)]);
    const double q = std::fabs(x[i]) / scale;
    if (q >= std::ldexp(1.0, -6) && q <= 448.0) {
      // A normal E4M3 value: relative error at most half an ulp of 3 mantissa bits.
      EXPECT_LE(std::fabs(y[i] - x[i]), std::ldexp(std::fabs(x[i]), -4)) << i;
    }
  }
  // The largest element of each block is never worse than one step of the format.
  for (int64_t b = 0; b * 32 < k; ++b) {
    int64_t arg = b * 32;
    for (int64_t i = b * 32; i < std::min(k, b * 32 + 32); ++i) {
      if (std::fabs(x[i]) > std::fabs(x[arg])) arg = i;
    }
    if (x[arg] == 0) continue;
    const double step = std::ldexp(std::fabs(x[arg]), -3);
    EXPECT_LE(std::fabs(y[arg] - x[arg]), step) << b;
  }
}

// Partial blocks take their scale from the real values only, and rows of any length work.
TEST(MxQuant, PartialBlocks) {
  for (int64_t k : {1, 17, 31, 33, 47, 4304}) {
    auto x = test::activation_like(static_cast<size_t>(k), static_cast<uint32_t>(k));
    const int64_t nb = mx_num_blocks(k);
    std::vector<uint8_t> codes(x.size()), scales(static_cast<size_t>(nb));
    mx_quantize_row(x.data(), k, ElemFormat::kE2M1, ScaleRule::kFloor, codes.data(), scales.data());
    const int64_t last = (nb - 1) * 32;
    float amax = 0;
    for (int64_t i = last; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
    int e2 = 0;
    std::frexp(amax, &e2);
    const int expect = amax == 0 ? 0 : std::clamp(e2 - 1 - 2, -127, 127) + 127;
    EXPECT_EQ(scales.back(), expect) << k;
  }
}

// Dual level, recomputed here step by step from MX_FORMATS.md.
TEST(MxQuant, DualLevelMatchesTheSpecSteps) {
  for (int64_t k : {512, 1000, 1537}) {
    auto x = test::activation_like(static_cast<size_t>(k), 99);
    std::vector<uint8_t> codes(x.size()), scales(static_cast<size_t>(mx_num_blocks(k)));
    std::vector<float> s0(static_cast<size_t>(mx_num_chunks(k))), y(x.size());
    mxfp4_dual_quantize_row(x.data(), k, codes.data(), scales.data(), s0.data());
    mxfp4_dual_dequantize_row(codes.data(), scales.data(), s0.data(), k, y.data());
    for (int64_t c = 0; c * 512 < k; ++c) {
      float amax = 0;
      for (int64_t i = c * 512; i < std::min(k, c * 512 + 512); ++i)
        amax = std::max(amax, std::fabs(x[i]));
      ASSERT_EQ(s0[c], amax / 6.0f);
      for (int64_t b = c * 16; b < std::min(mx_num_blocks(k), c * 16 + 16); ++b) {
        float tmax = 0;
        std::vector<float> t;
        for (int64_t i = b * 32; i < std::min(k, b * 32 + 32); ++i) {
          t.push_back(s0[c] == 0 ? 0 : bf16_to_float(float_to_bf16(x[i] / s0[c])));
          tmax = std::max(tmax, std::fabs(t.back()));
        }
        int e2 = 0;
        std::frexp(tmax, &e2);
        const int e1 = tmax == 0 ? -127 : std::clamp(e2 - 1 - 2, -127, 127);
        ASSERT_EQ(scales[b], e1 + 127);
        for (size_t j = 0; j < t.size(); ++j) {
          // The element codec is checked exhaustively in formats_codec_test.
          const double q = t[j] / std::ldexp(1.0, e1);
          ASSERT_EQ(codes[b * 32 + j], float_to_e2m1(q));
          const double elem = e2m1_to_float(codes[b * 32 + j]);
          ASSERT_EQ(y[b * 32 + j], static_cast<float>(elem * std::ldexp(1.0, e1)) * s0[c]);
        }
      }
    }
  }
}

TEST(MxLayout, Fp4PackingOrders) {
  std::vector<uint8_t> codes(64);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i % 16);
  std::vector<uint8_t> packed(32), back(64);
  fp4_pack(codes.data(), 64, Fp4Order::kAdjacent, packed.data());
  EXPECT_EQ(packed[0], 0x10);  // element 0 low, element 1 high
  EXPECT_EQ(packed[1], 0x32);
  fp4_pack(codes.data(), 64, Fp4Order::kSplitHalf, packed.data());
  EXPECT_EQ(packed[0], (codes[16] << 4) | codes[0]);  // GGUF: j with j + 16
  EXPECT_EQ(packed[17], (codes[49] << 4) | codes[33]);
  for (Fp4Order o : {Fp4Order::kAdjacent, Fp4Order::kSplitHalf}) {
    for (int64_t k : {1, 17, 33, 47, 64}) {
      fp4_pack(codes.data(), k, o, packed.data());
      fp4_unpack(packed.data(), k, o, back.data());
      for (int64_t i = 0; i < k; ++i) ASSERT_EQ(back[i], codes[i]) << k << " " << i;
    }
  }
}

// Every byte against the orders' definitions: adjacent pairs; per block of 32 (a last short
// block of L values splits at (L + 1) / 2), value j low and j + half high.
TEST(MxLayout, Fp4PackingMatchesTheOrdersByteForByte) {
  std::vector<uint8_t> codes(96);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 7 + 3) % 16);
  for (int64_t k : {1, 2, 31, 32, 33, 47, 64, 95, 96}) {
    std::vector<uint8_t> adj(static_cast<size_t>(fp4_packed_bytes(k)));
    std::vector<uint8_t> split(adj.size()), want_adj(adj.size(), 0), want_split(adj.size(), 0);
    for (int64_t i = 0; i < k; ++i) {
      want_adj[static_cast<size_t>(i / 2)] |= static_cast<uint8_t>(codes[i] << (i % 2 * 4));
      const int64_t b = i / 32, j = i % 32, len = std::min<int64_t>(32, k - 32 * b);
      const int64_t half = (len + 1) / 2;
      want_split[static_cast<size_t>(16 * b + (j < half ? j : j - half))] |=
          static_cast<uint8_t>(codes[i] << (j < half ? 0 : 4));
    }
    fp4_pack(codes.data(), k, Fp4Order::kAdjacent, adj.data());
    fp4_pack(codes.data(), k, Fp4Order::kSplitHalf, split.data());
    EXPECT_EQ(adj, want_adj) << k;
    EXPECT_EQ(split, want_split) << k;
  }
}

TEST(MxLayout, PairedScalesPadOddBlockCounts) {
  // K = 688: 22 blocks (even). K = 240: 8. K = 47: 2. K = 33: 2. K = 17: 1 -> padded to 2.
  // K = 4304: 135 blocks -> 136.
  for (int64_t k : {17, 33, 47, 240, 688, 4304}) {
    const int64_t nb = mx_num_blocks(k);
    const int64_t cols = mx_paired_scale_cols(k);
    EXPECT_EQ(cols, nb % 2 ? nb + 1 : nb);
    const int64_t n = 3;
    std::vector<uint8_t> canon(static_cast<size_t>(n * nb)),
        paired(static_cast<size_t>(n * cols), 0xAA), back(canon.size());
    for (size_t i = 0; i < canon.size(); ++i) canon[i] = static_cast<uint8_t>(100 + i % 50);
    mx_scales_to_paired(canon.data(), n, k, paired.data());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t b = 0; b < nb; ++b) ASSERT_EQ(paired[r * cols + b], canon[r * nb + b]);
      if (nb % 2) {
        EXPECT_EQ(paired[r * cols + nb], 0);
      }
    }
    mx_scales_from_paired(paired.data(), n, k, back.data());
    EXPECT_EQ(back, canon);
  }
}

}  // namespace
}  // namespace mx
