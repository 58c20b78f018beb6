// GPTQ into the MX schemes against a float64 GPTQ written here from the contract in
// quant/gptq.h: its own Cholesky factorization and inverse, one column at a time with every
// error carried at once (no lazy batches), the codec's primitives for each value.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "core/thread_pool.h"
#include "formats/half.h"
#include "formats/mx_block.h"
#include "formats/mx_layout.h"
#include "quant/gptq.h"
#include "test_util.h"

namespace mx {
namespace {

using Matrix = std::vector<double>;

// Lower L with A = L L^T, by the textbook recurrence.
Matrix cholesky(const Matrix& a, int64_t k) {
  Matrix l(a.size(), 0.0);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double s = a[i * k + j];
      for (int64_t p = 0; p < j; ++p) s -= l[i * k + p] * l[j * k + p];
      l[i * k + j] = i == j ? std::sqrt(s) : s / l[j * k + j];
    }
  }
  return l;
}

// A^-1 by solving L L^T x = e_c for every column c.
Matrix inverse(const Matrix& a, int64_t k) {
  const Matrix l = cholesky(a, k);
  Matrix inv(a.size());
  std::vector<double> y(static_cast<size_t>(k));
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t i = 0; i < k; ++i) {
      double s = i == c ? 1.0 : 0.0;
      for (int64_t p = 0; p < i; ++p) s -= l[i * k + p] * y[p];
      y[i] = s / l[i * k + i];
    }
    for (int64_t i = k - 1; i >= 0; --i) {
      double s = y[i];
      for (int64_t p = i + 1; p < k; ++p) s -= l[p * k + i] * inv[p * k + c];
      inv[i * k + c] = s / l[i * k + i];
    }
  }
  return inv;
}

struct Reference {
  std::vector<uint8_t> codes, scales;
  std::vector<float> s0;
};

// The contract, for one weight [n, k] and Hessian h.
Reference reference_gptq(const std::vector<float>& w, int64_t n, int64_t k, const Matrix& h,
                         Scheme scheme, ScaleRule rule, double damp, bool act_order) {
  const SchemeInfo& info = scheme_info(scheme);
  const ScaleRule r = info.dual ? ScaleRule::kFloor : rule;
  std::vector<int64_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (act_order) {
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return h[a * k + a] > h[b * k + b]; });
  }
  double mean = 0;
  for (int64_t i = 0; i < k; ++i) mean += h[i * k + i] / static_cast<double>(k);
  Matrix hp(h.size());
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) hp[i * k + j] = h[perm[i] * k + perm[j]];
    hp[i * k + i] += damp * mean;
  }
  // U upper with Hinv = U^T U: the transpose of Hinv's lower Cholesky factor.
  const Matrix l = cholesky(inverse(hp, k), k);
  auto u = [&](int64_t i, int64_t j) { return l[j * k + i]; };
  const int64_t nb = mx_num_blocks(k), nc = mx_num_chunks(k);
  Reference out{std::vector<uint8_t>(static_cast<size_t>(n * k)),
                std::vector<uint8_t>(static_cast<size_t>(n * nb)),
                std::vector<float>(static_cast<size_t>(n * nc))};
  auto elem = [&](float x, float s0) {
    return info.dual ? (s0 == 0 ? 0.0f : round_to_bf16(x / s0)) : x;
  };
  auto set_scales = [&](const std::vector<float>& row, int64_t row_i, int64_t from, bool all) {
    for (int64_t c = 0; c < k; c += kMxBlock) {
      if (!all && c != from) continue;
      if (info.dual && c % kMxDualChunk == 0) {
        float amax = 0;
        for (int64_t j = c; j < std::min(k, c + kMxDualChunk); ++j)
          amax = std::max(amax, std::fabs(row[j]));
        out.s0[row_i * nc + c / kMxDualChunk] = amax / 6.0f;
      }
      const float s0 = info.dual ? out.s0[row_i * nc + c / kMxDualChunk] : 0.0f;
      float amax = 0;
      for (int64_t j = c; j < std::min(k, c + kMxBlock); ++j)
        amax = std::max(amax, std::fabs(elem(row[j], s0)));
      out.scales[row_i * nb + c / kMxBlock] = mx_scale_byte(amax, info.weight, r);
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> cur(static_cast<size_t>(k));
    std::vector<float> orig(w.begin() + i * k, w.begin() + (i + 1) * k);
    for (int64_t a = 0; a < k; ++a) cur[a] = w[i * k + perm[a]];
    if (act_order) set_scales(orig, i, 0, true);
    for (int64_t a = 0; a < k; ++a) {
      const int64_t col = perm[a];
      if (!act_order && a % kMxBlock == 0) {
        std::vector<float> now(static_cast<size_t>(k));
        for (int64_t j = 0; j < k; ++j) now[j] = static_cast<float>(cur[j]);
        set_scales(now, i, a, false);
        // The search: the block's exponent or the one above, by the block's GPTQ loss.
        uint8_t& sc = out.scales[i * nb + a / kMxBlock];
        const float s0 = info.dual ? out.s0[i * nc + a / kMxDualChunk] : 0.0f;
        auto loss = [&](uint8_t byte) {
          std::vector<double> t(cur.begin() + a, cur.begin() + std::min(k, a + kMxBlock));
          double sum = 0;
          for (size_t j = 0; j < t.size(); ++j) {
            const int e = e8m0_exponent(byte);
            const uint8_t code = elem_encode(
                info.weight,
                std::ldexp(static_cast<double>(elem(static_cast<float>(t[j]), s0)), -e));
            float q = static_cast<float>(
                std::ldexp(static_cast<double>(elem_decode(info.weight, code)), e));
            if (info.dual) q *= s0;
            const double err = (t[j] - q) / u(a + j, a + j);
            sum += err * err;
            for (size_t p = j + 1; p < t.size(); ++p) t[p] -= err * u(a + j, a + p);
          }
          return sum;
        };
        if (sc != 0 && sc < 254 && loss(static_cast<uint8_t>(sc + 1)) < loss(sc)) ++sc;
      }
      const float s0 = info.dual ? out.s0[i * nc + col / kMxDualChunk] : 0.0f;
      const int e = e8m0_exponent(out.scales[i * nb + col / kMxBlock]);
      const uint8_t code = elem_encode(
          info.weight, std::ldexp(static_cast<double>(elem(static_cast<float>(cur[a]), s0)), -e));
      out.codes[i * k + col] = code;
      float q =
          static_cast<float>(std::ldexp(static_cast<double>(elem_decode(info.weight, code)), e));
      if (info.dual) q *= s0;
      const double err = (cur[a] - q) / u(a, a);
      for (int64_t j = a + 1; j < k; ++j) cur[j] -= err * u(a, j);
    }
  }
  return out;
}

// Inputs with correlated columns and a few loud ones, as activations have.
std::vector<float> inputs(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r) {
    const float common = d(rng);
    for (int64_t c = 0; c < k; ++c) {
      const float loud = c % 37 == 5 ? 8.0f : 1.0f;
      x[r * k + c] = loud * (d(rng) + 0.6f * common);
    }
  }
  return x;
}

std::vector<float> weights(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = d(rng);
  return w;
}

std::vector<uint8_t> unpacked_codes(const MxWeights& q) {
  std::vector<uint8_t> codes(static_cast<size_t>(q.n * q.k));
  for (int64_t r = 0; r < q.n; ++r) {
    const uint8_t* src = q.codes.data_as<uint8_t>() + r * q.row_bytes();
    if (scheme_info(q.scheme).weight == ElemFormat::kE2M1) {
      fp4_unpack(src, q.k, Fp4Order::kAdjacent, &codes[r * q.k]);
    } else {
      std::copy(src, src + q.k, &codes[r * q.k]);
    }
  }
  return codes;
}

struct Case {
  Scheme scheme;
  int64_t k;
  bool act_order;
};

class GptqEqualsReference : public ::testing::TestWithParam<Case> {};

TEST_P(GptqEqualsReference, CodesAndScales) {
  const Case c = GetParam();
  const int64_t n = 13, m = 3 * c.k;
  const std::vector<float> x = inputs(m, c.k, 7);
  const std::vector<float> w = weights(n, c.k, 11);
  ThreadPool pool(2);
  Hessian acc(c.k);
  acc.add(x.data(), m, &pool);
  const Matrix h = acc.matrix();
  // The accumulation against a plain double sum.
  for (int64_t i : {int64_t{0}, c.k / 2, c.k - 1}) {
    double s = 0;
    for (int64_t r = 0; r < m; ++r) s += double(x[r * c.k + i]) * x[r * c.k + c.k - 1 - i];
    EXPECT_NEAR(h[i * c.k + c.k - 1 - i], s, 1e-9 * std::fabs(s) + 1e-9);
  }
  GptqOptions opt;
  opt.act_order = c.act_order;
  auto q = gptq_quantize(w.data(), n, c.k, h, c.scheme, ScaleRule::kFloor, opt, &pool, "w");
  ASSERT_TRUE(q.is_ok()) << q.status().to_string();
  const Reference ref =
      reference_gptq(w, n, c.k, h, c.scheme, ScaleRule::kFloor, opt.damp, c.act_order);
  const std::vector<uint8_t> codes = unpacked_codes(*q);
  int64_t differ = 0;
  for (size_t i = 0; i < codes.size(); ++i) differ += codes[i] != ref.codes[i];
  EXPECT_EQ(differ, 0) << "of " << codes.size();
  const uint8_t* sc = q->scales.data_as<uint8_t>();
  EXPECT_TRUE(std::equal(ref.scales.begin(), ref.scales.end(), sc));
  if (scheme_info(c.scheme).dual) {
    const float* s0 = q->chunk_scales.data_as<float>();
    EXPECT_TRUE(std::equal(ref.s0.begin(), ref.s0.end(), s0));
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, GptqEqualsReference,
                         ::testing::Values(Case{Scheme::kW8A8Mxfp8, 96, false},
                                           Case{Scheme::kW4A8Mxfp4, 200, false},
                                           Case{Scheme::kW4A8Mxfp4, 200, true},
                                           Case{Scheme::kW4A4Mxfp4, 130, false},
                                           Case{Scheme::kW4A4Mxfp4Dual, 700, false},
                                           Case{Scheme::kW4A4Mxfp4Dual, 600, true},
                                           Case{Scheme::kW8A8Mxfp8, 256, true}));

// With uncorrelated inputs of equal energy no error has anywhere to go: GPTQ without the scale
// search is rounding to nearest, bit for bit the codec's.
TEST(Gptq, IdentityHessianIsRoundToNearest) {
  for (Scheme s : {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4Dual}) {
    const int64_t n = 9, k = 1100;
    const std::vector<float> w = weights(n, k, 3);
    Matrix h(static_cast<size_t>(k * k), 0.0);
    for (int64_t i = 0; i < k; ++i) h[i * k + i] = 4.0;
    GptqOptions plain;
    plain.scale_search = false;
    auto q = gptq_quantize(w.data(), n, k, h, s, ScaleRule::kFloor, plain, nullptr, "w");
    ASSERT_TRUE(q.is_ok());
    Tensor t = Tensor::empty(DType::kF32, {n, k});
    std::copy(w.begin(), w.end(), t.mutable_data_as<float>());
    auto rtn = quantize_weight(t, s, ScaleRule::kFloor, "w");
    ASSERT_TRUE(rtn.is_ok());
    EXPECT_EQ(test::sha256_hex(q->codes.data(), q->codes.nbytes()),
              test::sha256_hex(rtn->codes.data(), rtn->codes.nbytes()));
    EXPECT_EQ(test::sha256_hex(q->scales.data(), q->scales.nbytes()),
              test::sha256_hex(rtn->scales.data(), rtn->scales.nbytes()));
  }
}

// What GPTQ is for: on inputs like the calibration's, the layer's output moves less than
// under rounding to nearest.
TEST(Gptq, OutputErrorBelowRoundToNearest) {
  const int64_t n = 32, k = 256, m = 1024;
  const std::vector<float> x = inputs(m, k, 5), w = weights(n, k, 6);
  Hessian acc(k);
  acc.add(x.data(), m, nullptr);
  Tensor t = Tensor::empty(DType::kF32, {n, k});
  std::copy(w.begin(), w.end(), t.mutable_data_as<float>());
  for (Scheme s : {Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4Dual}) {
    for (bool act_order : {false, true}) {
      GptqOptions opt;
      opt.act_order = act_order;
      auto g = gptq_quantize(w.data(), n, k, acc.matrix(), s, ScaleRule::kFloor, opt, nullptr, "w");
      auto r = quantize_weight(t, s, ScaleRule::kFloor, "w");
      ASSERT_TRUE(g.is_ok() && r.is_ok());
      const Tensor gd = dequantize_weight(*g), rd = dequantize_weight(*r);
      double eg = 0, er = 0;
      for (int64_t row = 0; row < m; ++row) {
        for (int64_t o = 0; o < n; ++o) {
          double yg = 0, yr = 0, y = 0;
          for (int64_t c = 0; c < k; ++c) {
            const double xv = x[row * k + c];
            y += xv * w[o * k + c];
            yg += xv * gd.data_as<float>()[o * k + c];
            yr += xv * rd.data_as<float>()[o * k + c];
          }
          eg += (y - yg) * (y - yg);
          er += (y - yr) * (y - yr);
        }
      }
      EXPECT_LT(eg, 0.75 * er) << scheme_info(s).name << " act_order " << act_order;
    }
  }
}

// The least-squares weights for quantized inputs, against the normal equations solved here.
TEST(Gptq, InputAwareWeightsSolveTheLeastSquares) {
  const int64_t n = 5, k = 72, m = 600;
  const std::vector<float> x = inputs(m, k, 9), w = weights(n, k, 10);
  std::vector<float> y(x.size());
  std::mt19937 rng(4);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (size_t i = 0; i < x.size(); ++i) y[i] = 0.9f * x[i] + noise(rng);
  Hessian hy(k);
  hy.add(y.data(), m, nullptr);
  CrossMoments c(k);
  c.add(x.data(), y.data(), m, nullptr);
  const double damp = 0.01;
  auto got = input_aware_weights(w.data(), n, k, c.matrix(), hy.matrix(), damp, nullptr);
  ASSERT_TRUE(got.is_ok());
  Matrix a(static_cast<size_t>(k * k)), cd(static_cast<size_t>(k * k));
  double mean = 0;
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      double hs = 0, cs = 0;
      for (int64_t r = 0; r < m; ++r) {
        hs += double(y[r * k + i]) * y[r * k + j];
        cs += double(x[r * k + i]) * y[r * k + j];
      }
      a[i * k + j] = hs;
      cd[i * k + j] = cs;
    }
    mean += a[i * k + i] / static_cast<double>(k);
  }
  for (int64_t i = 0; i < k; ++i) {
    a[i * k + i] += damp * mean;
    cd[i * k + i] += damp * mean;
  }
  const Matrix inv = inverse(a, k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k; ++j) {
      double v = 0;
      for (int64_t i = 0; i < k; ++i) {
        double cm = 0;
        for (int64_t p = 0; p < k; ++p) cm += cd[i * k + p] * inv[p * k + j];
        v += w[r * k + i] * cm;
      }
      EXPECT_NEAR((*got)[r * k + j], v, 1e-5 + 1e-4 * std::fabs(v)) << r << "," << j;
    }
  }
}

TEST(Gptq, RefusesNonFiniteWeightsAndBadBatches) {
  std::vector<float> w = weights(2, 64, 1);
  Matrix h(64 * 64, 0.0);
  for (int64_t i = 0; i < 64; ++i) h[i * 64 + i] = 1.0;
  w[70] = NAN;
  auto q = gptq_quantize(w.data(), 2, 64, h, Scheme::kW4A8Mxfp4, ScaleRule::kFloor, {}, nullptr,
                         "model.layers.0.mlp.up_proj.weight");
  ASSERT_FALSE(q.is_ok());
  EXPECT_NE(q.status().message().find("up_proj"), std::string::npos);
  w[70] = 0;
  GptqOptions opt;
  opt.batch = 48;
  EXPECT_FALSE(
      gptq_quantize(w.data(), 2, 64, h, Scheme::kW4A8Mxfp4, ScaleRule::kFloor, opt, nullptr, "w")
          .is_ok());
  h[5 * 64 + 5] = -1e9;  // not positive definite, whatever the damping
  EXPECT_FALSE(
      gptq_quantize(w.data(), 2, 64, h, Scheme::kW4A8Mxfp4, ScaleRule::kFloor, {}, nullptr, "w")
          .is_ok());
}

}  // namespace
}  // namespace mx
