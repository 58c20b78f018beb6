// The GEMM over ggml blocks (kernels/ggml_gemm.h), every table variant against a double
// computation done here from the reference-dequantized weights.
//
// Tolerance, from the standard summation error analysis: any order of summing k products in
// FP32 (a product rounded or fused into an FMA) leaves each term at most k roundings (its
// product, and one per addition with a disjoint set of other terms), so with u = 2^-24
//   |y - sum x_j w_j| <= gamma_k * S + k * 2^-149,   S = sum |x_j w_j|, gamma_k = k u / (1 - k u)
// (the second term for roundings in the subnormal range). gamma_k <= 2 k u = k * 2^-23 while
// k u <= 1/2; the slack over gamma_k also covers the double computation's own error.
#include "kernels/ggml_gemm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "formats/half.h"
#include "ggml_test_rows.h"
#include "test_util.h"

namespace mx {
namespace {

constexpr GgmlType kTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,   GgmlType::kBF16,   GgmlType::kQ4_0,
    GgmlType::kQ4_1, GgmlType::kQ5_0,  GgmlType::kQ5_1,   GgmlType::kQ8_0,
    GgmlType::kQ2_K, GgmlType::kQ3_K,  GgmlType::kQ4_K,   GgmlType::kQ5_K,
    GgmlType::kQ6_K, GgmlType::kMXFP4, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS};

struct Case {
  GgmlType type;
  int64_t m, n, k;
  uint32_t seed;
};

std::string describe(const Case& c) {
  return std::string(ggml_type_info(c.type).name) + " m=" + std::to_string(c.m) +
         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " seed=" + std::to_string(c.seed);
}

// Inputs of one case and what the test computes from them on its own.
struct Problem {
  int64_t ldx = 0, ldy = 0, row_bytes = 0;
  std::vector<uint8_t> w;
  std::vector<float> x;       // [m, ldx], the padding NaN so that reads past k show
  std::vector<float> wf;      // [n, k], reference-dequantized
  std::vector<double> exact;  // [m, n]
  std::vector<double> abs_sum;
  std::vector<float> ref32;  // [m, n], the FP32 sum in k order
};

Problem make_problem(const Case& c) {
  Problem p;
  std::mt19937 rng(c.seed);
  p.ldx = c.k + 3;
  p.ldy = c.n + 2;
  p.row_bytes = ggml_row_bytes(c.type, c.k);
  p.w = test::random_rows(c.type, c.n, c.k, rng);
  const std::vector<float> act = test::activation_like(static_cast<size_t>(c.m * c.k), c.seed);
  p.x.assign(static_cast<size_t>(c.m * p.ldx), std::nanf(""));
  for (int64_t i = 0; i < c.m; ++i) {
    std::copy(act.begin() + i * c.k, act.begin() + (i + 1) * c.k, p.x.begin() + i * p.ldx);
  }
  p.wf.resize(static_cast<size_t>(c.n * c.k));
  for (int64_t r = 0; r < c.n; ++r) {
    ggml_type_info(c.type).reference(p.w.data() + r * p.row_bytes, p.wf.data() + r * c.k, c.k);
  }
  p.exact.resize(static_cast<size_t>(c.m * c.n));
  p.abs_sum.resize(p.exact.size());
  p.ref32.resize(p.exact.size());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t r = 0; r < c.n; ++r) {
      double s = 0.0, a = 0.0;
      float s32 = 0.0f;
      for (int64_t j = 0; j < c.k; ++j) {
        const float xj = p.x[i * p.ldx + j], wj = p.wf[r * c.k + j];
        s += static_cast<double>(xj) * wj;
        a += std::fabs(static_cast<double>(xj) * wj);
        s32 += xj * wj;
      }
      p.exact[i * c.n + r] = s;
      p.abs_sum[i * c.n + r] = a;
      p.ref32[i * c.n + r] = s32;
    }
  }
  return p;
}

// The scratch the header asks for, kGgmlGemmRows * k floats 32-byte aligned, allocated to
// size (rounded up to 32 bytes) so that the sanitizers see a kernel writing past it.
struct Scratch {
  explicit Scratch(int64_t k)
      : ptr(static_cast<float*>(std::aligned_alloc(
                32, static_cast<size_t>((kGgmlGemmRows * k * 4 + 31) / 32 * 32))),
            &std::free) {}
  std::unique_ptr<float, decltype(&std::free)> ptr;
};

constexpr uint32_t kUntouched = 0x7FC0BEEFu;  // a NaN no kernel computes

// y of one kernel over [n_begin, n_end), untouched elsewhere.
std::vector<float> run(const GgmlGemmKernels& kern, const Case& c, const Problem& p, int64_t m,
                       const float* x, int64_t n_begin, int64_t n_end) {
  std::vector<float> y(static_cast<size_t>(m * p.ldy), std::bit_cast<float>(kUntouched));
  const GgmlGemmArgs args{c.type, p.w.data(), p.row_bytes, x, y.data(), m, c.k, p.ldx, p.ldy};
  Scratch s(c.k);
  kern.gemm(args, n_begin, n_end, s.ptr.get());
  return y;
}

std::vector<const GgmlGemmKernels*> variants() {
  std::vector<const GgmlGemmKernels*> v;
  for (IsaLevel l : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    if (const GgmlGemmKernels* k = ggml_gemm_kernels_for(l)) v.push_back(k);
  }
  return v;
}

void check_case(const Case& c) {
  SCOPED_TRACE(describe(c));
  const Problem p = make_problem(c);
  std::vector<std::pair<int64_t, int64_t>> ranges = {{0, c.n}, {c.n / 2, c.n / 2}};
  if (c.n >= 3) ranges.push_back({1, c.n - 1});
  for (const GgmlGemmKernels* kern : variants()) {
    SCOPED_TRACE(std::string("isa=") + std::string(isa_name(kern->isa)));
    for (const auto& [nb, ne] : ranges) {
      SCOPED_TRACE("range [" + std::to_string(nb) + ", " + std::to_string(ne) + ")");
      const std::vector<float> y = run(*kern, c, p, c.m, p.x.data(), nb, ne);
      int failures = 0;
      for (int64_t i = 0; i < c.m && failures < 5; ++i) {
        for (int64_t r = 0; r < p.ldy && failures < 5; ++r) {
          const float got = y[i * p.ldy + r];
          if (r < nb || r >= ne) {
            failures += std::bit_cast<uint32_t>(got) != kUntouched;
            EXPECT_EQ(std::bit_cast<uint32_t>(got), kUntouched)
                << "wrote y[" << i << "," << r << "]";
            continue;
          }
          const double want = p.exact[i * c.n + r];
          const double tol =
              static_cast<double>(c.k) * (0x1p-23 * p.abs_sum[i * c.n + r] + 0x1p-149);
          const bool ok = std::isfinite(got) && std::fabs(got - want) <= tol;
          failures += !ok;
          EXPECT_TRUE(ok) << "y[" << i << "," << r << "] = " << got << ", exact " << want
                          << ", tolerance " << tol;
          if (kern->isa == IsaLevel::kScalar) {
            // The reference is by definition the FP32 sum in k order.
            EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(p.ref32[i * c.n + r]))
                << "scalar y[" << i << "," << r << "]";
          }
        }
      }
    }
  }
}

TEST(GgmlGemm, EveryVariantOnOddShapesWithinTheSummationBound) {
  uint32_t seed = 1234;
  for (GgmlType t : kTypes) {
    const GgmlTypeInfo& info = ggml_type_info(t);
    ASSERT_TRUE(info.supported) << info.name;
    ASSERT_NE(info.reference, nullptr) << info.name;
    const test::BlockLayout* l = test::layout_of(t);
    if (l != nullptr) {
      ASSERT_EQ(info.block_bytes, l->bytes) << info.name;
    }
    const int64_t b = info.block;
    std::vector<int64_t> ks = {b, 3 * b};
    if (b == 1) ks = {1, 3, 7, 24, 31, 97, 1100};
    for (int64_t m : {1, 3, 17}) {
      for (int64_t n : {1, 5, 33}) {
        for (int64_t k : ks) check_case({t, m, n, k, seed++});
      }
    }
  }
}

// The header promises that an output does not depend on the batch or on the column range:
// every row alone (m = 1) and every column alone give the bits of the full call. The batch
// of 11 rows and k past a thousand values are meant to take the kernels' other paths (whole
// rows against rows in pieces) than the single row does.
TEST(GgmlGemm, ResultsDoNotDependOnBatchOrColumnRange) {
  uint32_t seed = 777;
  for (GgmlType t : kTypes) {
    const int64_t b = ggml_type_info(t).block;
    for (int64_t k : {b == 1 ? int64_t{31} : 2 * b, (1100 + b - 1) / b * b}) {
      const Case c{t, 11, 11, k, seed++};
      SCOPED_TRACE(describe(c));
      const Problem p = make_problem(c);
      for (const GgmlGemmKernels* kern : variants()) {
        SCOPED_TRACE(std::string("isa=") + std::string(isa_name(kern->isa)));
        const std::vector<float> full = run(*kern, c, p, c.m, p.x.data(), 0, c.n);
        const auto bits = [&](int64_t i, int64_t r) {
          return std::bit_cast<uint32_t>(full[i * p.ldy + r]);
        };
        for (int64_t i = 0; i < c.m; ++i) {
          const std::vector<float> one = run(*kern, c, p, 1, p.x.data() + i * p.ldx, 0, c.n);
          for (int64_t r = 0; r < c.n; ++r) {
            EXPECT_EQ(std::bit_cast<uint32_t>(one[r]), bits(i, r)) << "row " << i << " alone";
          }
        }
        for (int64_t r = 0; r < c.n; ++r) {
          const std::vector<float> col = run(*kern, c, p, c.m, p.x.data(), r, r + 1);
          for (int64_t i = 0; i < c.m; ++i) {
            EXPECT_EQ(std::bit_cast<uint32_t>(col[i * p.ldy + r]), bits(i, r))
                << "column " << r << " alone, row " << i;
          }
        }
      }
    }
  }
}

// Batches of 2..9 rows, which the AVX2 kernel tiles differently (four rows by one weight row,
// pairs by two, a last one or three, the scratch path past eight): each row gets the bits it
// gets alone. n = 11 leaves a last group of three weight rows.
TEST(GgmlGemm, SmallBatchesGiveEveryRowItsBitsAlone) {
  uint32_t seed = 4242;
  for (GgmlType t : kTypes) {
    const int64_t b = ggml_type_info(t).block;
    const int64_t k = b == 1 ? 45 : 2 * b;
    for (int64_t m = 2; m <= 9; ++m) {
      const Case c{t, m, 11, k, seed++};
      SCOPED_TRACE(describe(c));
      const Problem p = make_problem(c);
      for (const GgmlGemmKernels* kern : variants()) {
        SCOPED_TRACE(std::string("isa=") + std::string(isa_name(kern->isa)));
        const std::vector<float> full = run(*kern, c, p, c.m, p.x.data(), 0, c.n);
        for (int64_t i = 0; i < c.m; ++i) {
          const std::vector<float> one = run(*kern, c, p, 1, p.x.data() + i * p.ldx, 0, c.n);
          for (int64_t r = 0; r < c.n; ++r) {
            const double want = p.exact[i * c.n + r];
            const double tol =
                static_cast<double>(c.k) * (0x1p-23 * p.abs_sum[i * c.n + r] + 0x1p-149);
            EXPECT_LE(std::fabs(full[i * p.ldy + r] - want), tol) << "y[" << i << "," << r << "]";
            EXPECT_EQ(std::bit_cast<uint32_t>(full[i * p.ldy + r]), std::bit_cast<uint32_t>(one[r]))
                << "row " << i << " of " << m << ", column " << r;
          }
        }
      }
    }
  }
}

TEST(GgmlGemm, DispatchOffersEverySupportedLevel) {
  ASSERT_NE(ggml_gemm_kernels_for(IsaLevel::kScalar), nullptr);
  EXPECT_EQ(ggml_gemm_kernels_for(IsaLevel::kScalar)->isa, IsaLevel::kScalar);
  if (isa_supported(IsaLevel::kAvx2)) {
    ASSERT_NE(ggml_gemm_kernels_for(IsaLevel::kAvx2), nullptr);
    EXPECT_EQ(ggml_gemm_kernels_for(IsaLevel::kAvx2)->isa, IsaLevel::kAvx2);
  } else {
    EXPECT_EQ(ggml_gemm_kernels_for(IsaLevel::kAvx2), nullptr);
  }
  EXPECT_LE(static_cast<int>(ggml_gemm_kernels().isa), static_cast<int>(active_isa()));
  EXPECT_EQ(ggml_gemm_kernels_for(ggml_gemm_kernels().isa), &ggml_gemm_kernels());
}

}  // namespace
}  // namespace mx
