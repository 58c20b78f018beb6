// The block Hadamard rotation: the scalar kernel against a float64 Walsh-Hadamard matrix built
// here from its definition (entry (i, j) = (-1)^popcount(i & j) / sqrt(block)), every ISA
// variant against the scalar kernel bit for bit on several rows, and a rotation applied twice
// giving the row back within FP32 rounding (the transform is its own inverse).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "formats/hadamard.h"
#include "test_util.h"

namespace mx {
namespace {

std::vector<double> dense_rotation(const std::vector<float>& x, int64_t block) {
  std::vector<double> y(x.size());
  const double s = 1.0 / std::sqrt(static_cast<double>(block));
  for (size_t b = 0; b < x.size(); b += static_cast<size_t>(block)) {
    for (int64_t i = 0; i < block; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < block; ++j) {
        const double sign = std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0;
        acc += sign * x[b + static_cast<size_t>(j)];
      }
      y[b + static_cast<size_t>(i)] = acc * s;
    }
  }
  return y;
}

TEST(Hadamard, ScalarMeetsTheDenseMatrix) {
  for (int64_t block : {32, 128}) {
    std::vector<float> x = test::activation_like(static_cast<size_t>(3 * block), 7);
    const std::vector<double> want = dense_rotation(x, block);
    hadamard_kernels_for(IsaLevel::kScalar)->rotate(x.data(), 3 * block, block);
    double scale = 0;
    for (double v : want) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(x[i], want[i], 4e-7 * scale * std::log2(static_cast<double>(block)))
          << "block " << block << " at " << i;
    }
  }
}

TEST(Hadamard, EveryVariantMatchesTheScalarKernel) {
  int variants = 0;
  for (IsaLevel isa : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    const HadamardKernels* kern = hadamard_kernels_for(isa);
    if (kern == nullptr) {
      std::printf("hadamard: %s not supported on this CPU, skipped\n",
                  std::string(isa_name(isa)).c_str());
      continue;
    }
    ++variants;
    for (int64_t block : {32, 128}) {
      for (int64_t blocks : {1, 2, 5, 33}) {
        const int64_t n = block * blocks;
        std::vector<float> x = test::activation_like(static_cast<size_t>(n), 11 + blocks);
        x[3] = 1e30f;  // an outlier that every block sum then carries
        x[static_cast<size_t>(n - 1)] = -0.0f;
        std::vector<float> want = x;
        hadamard_kernels_for(IsaLevel::kScalar)->rotate(want.data(), n, block);
        kern->rotate(x.data(), n, block);
        EXPECT_EQ(std::memcmp(x.data(), want.data(), x.size() * sizeof(float)), 0)
            << isa_name(isa) << " block " << block << " x " << blocks;
      }
    }
  }
  EXPECT_GE(variants, 2);
}

// A width that is not a multiple of the block: whole blocks, then the last run split into
// descending powers of two, each its own normalized transform.
TEST(Hadamard, AShortLastRunIsRotatedInPowersOfTwo) {
  for (IsaLevel isa : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512}) {
    const HadamardKernels* kern = hadamard_kernels_for(isa);
    if (kern == nullptr) continue;
    for (int64_t block : {32, 128}) {
      for (int64_t n : {int64_t{688}, int64_t{129}, int64_t{1}, int64_t{7}, 2 * block + 48}) {
        std::vector<float> x = test::activation_like(static_cast<size_t>(n), 5);
        std::vector<double> want(x.size());
        int64_t at = 0;
        auto put = [&](int64_t len) {
          const std::vector<float> part(x.begin() + at, x.begin() + at + len);
          const std::vector<double> r = dense_rotation(part, len);
          std::copy(r.begin(), r.end(), want.begin() + at);
          at += len;
        };
        while (n - at >= block) put(block);
        for (int64_t p = block / 2; p >= 1; p /= 2) {
          if (n - at >= p) put(p);
        }
        ASSERT_EQ(at, n);
        kern->rotate(x.data(), n, block);
        for (size_t i = 0; i < x.size(); ++i) {
          EXPECT_NEAR(x[i], want[i], 1e-5 * (1 + std::fabs(want[i])))
              << isa_name(isa) << " n " << n << " at " << i;
        }
      }
    }
  }
}

TEST(Hadamard, RotatingTwiceGivesTheRowBack) {
  const HadamardKernels& kern = hadamard_kernels();
  for (int64_t block : {32, 128}) {
    const std::vector<float> x = test::activation_like(static_cast<size_t>(4 * block), 3);
    std::vector<float> y = x;
    kern.rotate(y.data(), 4 * block, block);
    EXPECT_NE(y, x);
    kern.rotate(y.data(), 4 * block, block);
    // FP32 rounding: each of the 2 log2(block) stages and two scalings rounds once, at the
    // magnitude of the block's largest value at most.
    for (size_t b = 0; b < x.size(); b += static_cast<size_t>(block)) {
      float top = 0;
      for (size_t i = b; i < b + static_cast<size_t>(block); ++i)
        top = std::max(top, std::fabs(x[i]));
      const float bound = std::ldexp(top, -23) * (2 * std::log2(float(block)) + 2);
      for (size_t i = b; i < b + static_cast<size_t>(block); ++i) {
        EXPECT_NEAR(y[i], x[i], bound) << "block " << block << " at " << i;
      }
    }
  }
}

}  // namespace
}  // namespace mx
