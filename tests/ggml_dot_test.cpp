// The integer GEMM over ggml blocks (kernels/ggml_dot.h): every table variant against a
// double computation done here from the reference-dequantized weights and the activation
// codes, and every variant's activation quantizer against the scalar one bit for bit and
// against the format's own bound (|x - d * code| <= d / 2, plus Q8_0's FP16 rounding of d).
//
// Tolerance. The integer sums are exact; what a variant rounds is per block a product of two
// or three scales, the conversion of a sum below 2^31 to FP32, and an accumulation over k /
// block terms (plus each reference-dequantized weight's own roundings, which the reference
// keeps and the integer path does not). A few roundings of each block's magnitude: 2^-16 of
// the sum of |w x| leaves ample room for those and none for a wrong code, scale or offset.
// Q4_1 and Q5_1 store w = d * q + m, and their two terms (d * dx * sum(q x) and m * d * sum(x)),
// each rounded alone, can cancel: their magnitude counts the terms, not w.
#include "kernels/ggml_dot.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "formats/half.h"
#include "ggml_test_rows.h"
#include "test_util.h"

namespace mx {
namespace {

using ggml_dot_detail::act_row_view;
using ggml_dot_detail::ActRowView;

constexpr GgmlType kTypes[] = {
    GgmlType::kQ4_0,  GgmlType::kQ4_1,   GgmlType::kQ5_0,  GgmlType::kQ5_1, GgmlType::kQ8_0,
    GgmlType::kQ2_K,  GgmlType::kQ3_K,   GgmlType::kQ4_K,  GgmlType::kQ5_K, GgmlType::kQ6_K,
    GgmlType::kMXFP4, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS};

std::vector<const GgmlDotKernels*> variants() {
  std::vector<const GgmlDotKernels*> v;
  for (IsaLevel l : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (const GgmlDotKernels* k = ggml_dot_kernels_for(l)) v.push_back(k);
  }
  return v;
}

// Activations of m rows, one of them zero and one with an outlier, quantized by `kern`.
std::vector<float> activations(int64_t m, int64_t k, uint32_t seed) {
  std::vector<float> x = test::activation_like(static_cast<size_t>(m * k), seed);
  if (m > 1) std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);
  if (m > 2) x[2 * k + k / 3] = -37.5f;
  return x;
}

std::vector<uint8_t> quantize(const GgmlDotKernels& kern, GgmlActType a, const float* x, int64_t m,
                              int64_t k) {
  const int64_t rb = ggml_act_row_bytes(a, k);
  std::vector<uint8_t> q(static_cast<size_t>(m * rb), 0xA5);
  for (int64_t i = 0; i < m; ++i) kern.quantize(a, x + i * k, k, q.data() + i * rb);
  return q;
}

TEST(GgmlDot, ActivationQuantizersAgreeAndKeepTheFormatsBound) {
  for (GgmlActType a : {GgmlActType::kQ8_0, GgmlActType::kQ8_K}) {
    const int64_t blk = ggml_act_block(a);
    for (int64_t k : {blk, 3 * blk, 7 * blk}) {
      const int64_t m = 5;
      const std::vector<float> x = activations(m, k, static_cast<uint32_t>(k));
      const std::vector<uint8_t> ref =
          quantize(*ggml_dot_kernels_for(IsaLevel::kScalar), a, x.data(), m, k);
      const int64_t rb = ggml_act_row_bytes(a, k);
      ASSERT_EQ(rb % 64, 0);
      for (int64_t i = 0; i < m; ++i) {
        const ActRowView v = act_row_view(a, ref.data() + i * rb, k);
        for (int64_t b = 0; b < k / blk; ++b) {
          int sum = 0;
          for (int64_t j = b * blk; j < (b + 1) * blk; ++j) {
            // Q8_K's scale is negative when its largest magnitude is positive.
            const double d = std::fabs(static_cast<double>(v.d[b]));
            const double err = std::fabs(x[i * k + j] - static_cast<double>(v.d[b]) * v.codes[j]);
            const double bound = a == GgmlActType::kQ8_0 ? d * (0.5 + 127.0 * 0x1p-11) : d * 0.5;
            EXPECT_LE(err, bound * (1 + 1e-6) + 1e-30) << "row " << i << " value " << j;
            EXPECT_GE(v.codes[j], -127);
            sum += v.codes[j];
            if (a == GgmlActType::kQ8_K && (j + 1) % 16 == 0) {
              EXPECT_EQ(v.sums[j / 16], sum);
              sum = 0;
            }
          }
          if (a == GgmlActType::kQ8_0) {
            EXPECT_EQ(v.s[b], v.d[b] * static_cast<float>(sum));
          }
        }
      }
      for (const GgmlDotKernels* kern : variants()) {
        SCOPED_TRACE(std::string(isa_name(kern->isa)) + " k=" + std::to_string(k));
        const std::vector<uint8_t> got = quantize(*kern, a, x.data(), m, k);
        for (int64_t i = 0; i < m; ++i) {
          // Bytes past the used part of the row are padding, never read.
          const int64_t used =
              a == GgmlActType::kQ8_0 ? k + 8 * (k / 32) : k + 4 * (k / 256) + k / 8;
          for (int64_t j = 0; j < used; ++j) {
            ASSERT_EQ(got[i * rb + j], ref[i * rb + j]) << "row " << i << " byte " << j;
          }
        }
      }
    }
  }
}

struct Case {
  GgmlType type;
  int64_t m, n, k;
  uint32_t seed;
};

// Every variant (rows as stored, and panels where a table reads them) on weights w and
// activations x against the exact product.
void check_rows(const Case& c, const std::vector<uint8_t>& w, const std::vector<float>& x) {
  SCOPED_TRACE(std::string(ggml_type_info(c.type).name) + " m=" + std::to_string(c.m) +
               " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
  const int64_t row_bytes = ggml_row_bytes(c.type, c.k);
  const GgmlActType at = ggml_act_type(c.type);
  const std::vector<uint8_t> xq =
      quantize(*ggml_dot_kernels_for(IsaLevel::kScalar), at, x.data(), c.m, c.k);
  const int64_t stride = ggml_act_row_bytes(at, c.k), ab = ggml_act_block(at);
  std::vector<float> wf(static_cast<size_t>(c.k));
  std::vector<double> exact(static_cast<size_t>(c.m * c.n)), mag(exact.size());
  // The block minimum of the affine types (the FP16 after d), zero for the others.
  const bool affine = c.type == GgmlType::kQ4_1 || c.type == GgmlType::kQ5_1;
  const int64_t block = ggml_type_info(c.type).block, block_bytes = row_bytes / (c.k / block);
  auto min_of = [&](const uint8_t* row, int64_t j) {
    if (!affine) return 0.0;
    uint16_t h;
    std::memcpy(&h, row + (j / block) * block_bytes + 2, 2);
    return static_cast<double>(fp16_to_float(h));
  };
  for (int64_t r = 0; r < c.n; ++r) {
    const uint8_t* row = w.data() + r * row_bytes;
    ggml_type_info(c.type).reference(row, wf.data(), c.k);
    for (int64_t i = 0; i < c.m; ++i) {
      const ActRowView v = act_row_view(at, xq.data() + i * stride, c.k);
      double s = 0, a = 0, min_term = 0;
      for (int64_t j = 0; j < c.k; ++j) {
        const double xv = static_cast<double>(v.d[j / ab]) * v.codes[j], m = min_of(row, j);
        const double p = static_cast<double>(wf[j]) * xv;
        s += p;
        a += affine ? std::fabs((wf[j] - m) * xv) : std::fabs(p);
        min_term += m * xv;
        if (affine && (j + 1) % block == 0) {
          a += std::fabs(min_term);
          min_term = 0;
        }
      }
      exact[i * c.n + r] = s;
      mag[i * c.n + r] = a;
    }
  }
  const int64_t ldy = c.n + 3;
  // Runs columns [nb, ne) from weights `wp` (rows, or panels of `panel` rows) and checks them.
  auto run_and_check = [&](const GgmlDotKernels& kern, const uint8_t* wp, int panel, int64_t nb,
                           int64_t ne) {
    std::vector<float> y(static_cast<size_t>(c.m * ldy), std::nanf(""));
    GgmlDotArgs args{c.type, wp, row_bytes, xq.data(), stride, y.data(), c.m, c.k, ldy};
    args.panel = panel;
    kern.gemm(args, nb, ne);
    int failures = 0;
    for (int64_t i = 0; i < c.m && failures < 4; ++i) {
      for (int64_t r = 0; r < ldy && failures < 4; ++r) {
        const float got = y[i * ldy + r];
        if (r < nb || r >= ne) {
          failures += !std::isnan(got);
          EXPECT_TRUE(std::isnan(got)) << "wrote y[" << i << "," << r << "]";
          continue;
        }
        const double want = exact[i * c.n + r];
        const double tol = 0x1p-16 * mag[i * c.n + r] + 1e-30;
        const bool ok = std::fabs(got - want) <= tol;
        failures += !ok;
        EXPECT_TRUE(ok) << "y[" << i << "," << r << "] = " << got << ", exact " << want
                        << ", tolerance " << tol;
      }
    }
  };
  // Column ranges from 0, from the middle, and from inside a panel's second half of eight.
  const int64_t starts[] = {0, c.n / 2, std::min<int64_t>(11, c.n - 1)};
  for (const GgmlDotKernels* kern : variants()) {
    SCOPED_TRACE(std::string("isa=") + std::string(isa_name(kern->isa)));
    for (int64_t nb : starts) run_and_check(*kern, w.data(), 0, nb, c.n);
    const int panel = kern->panel_rows(c.type);
    if (panel == 0) continue;
    SCOPED_TRACE("panels of " + std::to_string(panel));
    std::vector<uint8_t> packed(static_cast<size_t>(ggml_panel_bytes(c.type, panel, c.n, c.k)),
                                0xA5);
    kern->repack(c.type, w.data(), row_bytes, c.n, c.k, packed.data());
    for (int64_t nb : starts) run_and_check(*kern, packed.data(), panel, nb, c.n);
  }
}

void check_case(const Case& c) {
  std::mt19937 rng(c.seed);
  check_rows(c, test::random_rows(c.type, c.n, c.k, rng), activations(c.m, c.k, c.seed));
}

TEST(GgmlDot, EveryVariantOnOddShapesMatchesTheDequantizedProduct) {
  uint32_t seed = 99;
  for (GgmlType t : kTypes) {
    ASSERT_TRUE(ggml_has_int_dot(t)) << ggml_type_info(t).name;
    const int64_t b = ggml_type_info(t).block;
    // Every row count a kernel call takes (1..8 at AVX-512, 1..4 below) and runs past them.
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) {
      for (int64_t n : {1, 7}) {
        for (int64_t k : {b, 3 * b, b == 32 ? 11 * b : 2 * b}) check_case({t, m, n, k, seed++});
      }
    }
  }
}

// Types some table reads as panels: whole panels, a partial last one, a column range starting
// inside a panel, and a k past the super-blocks a panel kernel sums in one pass.
TEST(GgmlDot, PanelsOnOddShapesMatchTheDequantizedProduct) {
  uint32_t seed = 7;
  for (GgmlType t : kTypes) {
    bool any = false;
    for (const GgmlDotKernels* kern : variants()) any |= kern->panel_rows(t) != 0;
    if (!any) continue;
    for (int64_t m : {1, 3, 8, 9, 17}) {
      for (int64_t n : {16, 37}) check_case({t, m, n, 512, seed++});
    }
    check_case({t, 9, 33, 130 * 256, seed++});
  }
}

// The integer sums at their bounds: every code of a block at the magnitude its format allows
// most (Q8_0's -128, the IQ4 grid's -127, the 2- to 6-bit codes all ones) against
// activation codes all +-127, so that a kernel summing more products in int16 than they fit,
// or feeding vpmaddubsw a pair beyond 2^15, gives a wrong result.
TEST(GgmlDot, EveryVariantHoldsAtTheProductBounds) {
  struct Extreme {
    GgmlType type;
    int64_t from, to;  // the code bytes of a stored block
    uint8_t fill;
  };
  constexpr Extreme kExtremes[] = {
      {GgmlType::kQ4_0, 2, 18, 0xFF},   {GgmlType::kQ4_1, 4, 20, 0xFF},
      {GgmlType::kQ5_0, 2, 22, 0xFF},   {GgmlType::kQ5_1, 4, 24, 0xFF},
      {GgmlType::kQ8_0, 2, 34, 0x80},   {GgmlType::kQ4_K, 16, 144, 0xFF},
      {GgmlType::kQ5_K, 16, 176, 0xFF}, {GgmlType::kQ6_K, 0, 192, 0xFF},
      {GgmlType::kIQ4_NL, 2, 18, 0x00}, {GgmlType::kIQ4_XS, 8, 136, 0x00},
      {GgmlType::kQ2_K, 16, 80, 0xFF},  {GgmlType::kQ3_K, 0, 96, 0xFF}};
  uint32_t seed = 31;
  for (const Extreme& e : kExtremes) {
    const Case c{e.type, 5, 37, 512, seed++};
    std::mt19937 rng(c.seed);
    std::vector<uint8_t> w = test::random_rows(c.type, c.n, c.k, rng);
    const int64_t block = ggml_type_info(c.type).block_bytes;
    for (size_t b = 0; b < w.size(); b += static_cast<size_t>(block)) {
      std::fill(w.begin() + static_cast<int64_t>(b) + e.from,
                w.begin() + static_cast<int64_t>(b) + e.to, e.fill);
    }
    // Rows of +1 and -1 (codes +-127 in both activation types), and one mixed.
    std::vector<float> x(static_cast<size_t>(c.m * c.k));
    for (int64_t i = 0; i < c.m * c.k; ++i) {
      const int64_t row = i / c.k;
      x[static_cast<size_t>(i)] = row == 4 ? (i % 3 == 0 ? -1.0f : 1.0f) : (row % 2 ? -1.0f : 1.0f);
    }
    check_rows(c, w, x);
  }
}

// The AVX2 table reads the AVX-512 table's panels with the same operations in the same order,
// so the two give the same bits (where this CPU runs both).
TEST(GgmlDot, Avx2AndAvx512PanelsAgreeBitForBit) {
  const GgmlDotKernels* a2 = ggml_dot_kernels_for(IsaLevel::kAvx2);
  const GgmlDotKernels* a5 = ggml_dot_kernels_for(IsaLevel::kAvx512);
  if (a2 == nullptr || a5 == nullptr) GTEST_SKIP() << "this CPU runs one of the two tables";
  uint32_t seed = 71;
  for (GgmlType t : kTypes) {
    if (a2->panel_rows(t) == 0 || a5->panel_rows(t) != a2->panel_rows(t)) continue;
    SCOPED_TRACE(ggml_type_info(t).name);
    const int64_t m = 9, n = 37, k = 512;
    std::mt19937 rng(seed);
    const std::vector<uint8_t> w = test::random_rows(t, n, k, rng);
    const std::vector<float> x = activations(m, k, seed++);
    const GgmlActType at = ggml_act_type(t);
    const std::vector<uint8_t> xq =
        quantize(*ggml_dot_kernels_for(IsaLevel::kScalar), at, x.data(), m, k);
    const int panel = a2->panel_rows(t);
    std::vector<uint8_t> packed(static_cast<size_t>(ggml_panel_bytes(t, panel, n, k)));
    a2->repack(t, w.data(), ggml_row_bytes(t, k), n, k, packed.data());
    std::vector<uint8_t> packed5(packed.size());
    a5->repack(t, w.data(), ggml_row_bytes(t, k), n, k, packed5.data());
    ASSERT_EQ(packed, packed5);
    std::vector<float> y2(static_cast<size_t>(m * n)), y5(y2.size());
    for (auto [kern, y] : {std::pair{a2, &y2}, std::pair{a5, &y5}}) {
      GgmlDotArgs args{t,
                       packed.data(),
                       ggml_row_bytes(t, k),
                       xq.data(),
                       ggml_act_row_bytes(at, k),
                       y->data(),
                       m,
                       k,
                       n};
      args.panel = panel;
      kern->gemm(args, 0, n);
    }
    for (size_t i = 0; i < y2.size(); ++i) {
      ASSERT_EQ(std::bit_cast<uint32_t>(y2[i]), std::bit_cast<uint32_t>(y5[i])) << "y[" << i << "]";
    }
  }
}

TEST(GgmlDot, FloatTypesStayOnTheFloatPath) {
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16}) {
    EXPECT_FALSE(ggml_has_int_dot(t)) << ggml_type_info(t).name;
  }
  EXPECT_EQ(ggml_act_type(GgmlType::kQ4_K), GgmlActType::kQ8_K);
  EXPECT_EQ(ggml_act_type(GgmlType::kIQ4_XS), GgmlActType::kQ8_K);
  EXPECT_EQ(ggml_act_type(GgmlType::kMXFP4), GgmlActType::kQ8_0);
  EXPECT_EQ(ggml_act_type(GgmlType::kQ5_1), GgmlActType::kQ8_0);
}

}  // namespace
}  // namespace mx
