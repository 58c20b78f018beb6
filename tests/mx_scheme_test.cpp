// Every MX scheme's matmul, dense and grouped (expert bank), against a scalar reference that
// dequantizes the same quantized operands with the formats reference and multiplies in
// double. Tolerance: FP32 summation-order rounding, (K + 16) * 2^-23 * sum |a_k * w_k|.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "core/thread_pool.h"
#include "formats/hadamard.h"
#include "formats/half.h"
#include "formats/mx_block.h"
#include "formats/mx_layout.h"
#include "kernels/ops.h"
#include "quant/linear.h"
#include "test_util.h"

namespace mx {
namespace {

const Scheme kMxSchemes[] = {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4,
                             Scheme::kW4A4Mxfp4Dual, Scheme::kW4A8Mxfp4Int8};

Tensor random_weight(int64_t n, int64_t k, uint32_t seed) {
  Tensor t = Tensor::empty(DType::kF32, {n, k});
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.05f);
  for (int64_t i = 0; i < n * k; ++i) t.mutable_data_as<float>()[i] = d(rng);
  return t;
}

// The activation row as the scheme quantizes it, dequantized by the reference codecs.
std::vector<float> ref_act(const float* x, int64_t k, Scheme s) {
  const SchemeInfo& info = scheme_info(s);
  std::vector<uint8_t> codes(static_cast<size_t>(k)), scales(static_cast<size_t>(mx_num_blocks(k)));
  std::vector<float> s0(static_cast<size_t>(mx_num_chunks(k))), out(static_cast<size_t>(k));
  if (info.int8_act) {
    // ggml's Q8_0, written from its description: per 32 values d = amax / 127 stored as FP16,
    // codes round(x * 127 / amax) half to even, each value d * code.
    for (int64_t b = 0; b < k; b += 32) {
      const int64_t n = std::min<int64_t>(32, k - b);
      float amax = 0;
      for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[b + i]));
      const float d = fp16_to_float(float_to_fp16(amax / 127.0f));
      const float id = amax > 0 ? 127.0f / amax : 0.0f;
      for (int64_t i = 0; i < n; ++i) out[b + i] = std::nearbyint(x[b + i] * id) * d;
    }
    return out;
  }
  if (info.dual) {
    mxfp4_dual_quantize_row(x, k, codes.data(), scales.data(), s0.data());
    mxfp4_dual_dequantize_row(codes.data(), scales.data(), s0.data(), k, out.data());
  } else {
    mx_quantize_row(x, k, info.activation, ScaleRule::kFloor, codes.data(), scales.data());
    mx_dequantize_row(codes.data(), scales.data(), k, info.activation, out.data());
  }
  // W4A8 multiplies the E4M3 elements as 14-bit fixed point: each rounded (to nearest even)
  // to a multiple of 2^-5 in units of its block scale.
  if (s == Scheme::kW4A8Mxfp4) {
    for (int64_t q = 0; q < k; ++q) {
      const float unit = std::ldexp(1.0f, scales[static_cast<size_t>(q / 32)] - 127 - 5);
      out[q] = std::nearbyint(out[q] / unit) * unit;
    }
  }
  return out;
}

// A copy of x[0, k) rotated by the scalar kernel (hadamard_test holds it to the matrix).
std::vector<float> rotated(const float* x, int64_t k, int64_t rotation) {
  std::vector<float> r(x, x + k);
  if (rotation > 0) hadamard_kernels_for(IsaLevel::kScalar)->rotate(r.data(), k, rotation);
  return r;
}

// The weights as the GEMM multiplies them: the stored codes dequantized, still rotated.
Tensor stored_weight(MxWeights q) {
  q.rotation = 0;
  return dequantize_weight(q);
}

// y_ref[m, n] and the bound of each element.
void ref_matmul(const std::vector<float>& a, int64_t m, const Tensor& wd, std::vector<double>* y,
                std::vector<double>* bound) {
  const int64_t n = wd.dim(0), k = wd.dim(1);
  y->assign(static_cast<size_t>(m * n), 0);
  bound->assign(y->size(), 0);
  const float* w = wd.data_as<float>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, mag = 0;
      for (int64_t q = 0; q < k; ++q) {
        const double p = static_cast<double>(a[i * k + q]) * w[j * k + q];
        s += p;
        mag += std::fabs(p);
      }
      (*y)[i * n + j] = s;
      (*bound)[i * n + j] = static_cast<double>(k + 16) * 0x1p-23 * mag + 1e-30;
    }
  }
}

// Also under block rotations: the weights' codes are those of the rows rotated by the scalar
// kernel, and each activation row is rotated the same way before the reference quantizes it.
TEST(MxScheme, DenseMatmulMatchesTheReference) {
  ThreadPool pool(2);
  ExecContext ctx(&pool);
  int cases = 0;
  for (int64_t rot : {0, 32, 128}) {
    for (Scheme s : kMxSchemes) {
      for (int64_t k : {32, 47, 240, 688, 2048}) {
        const int64_t n = 19;
        const Tensor w = random_weight(n, k, static_cast<uint32_t>(k));
        auto q = quantize_weight(w, s, ScaleRule::kFloor, "w", nullptr, rot);
        ASSERT_TRUE(q.is_ok());
        if (rot > 0) {
          Tensor wr = Tensor::empty(DType::kF32, {n, k});
          for (int64_t r = 0; r < n; ++r) {
            const auto row = rotated(w.data_as<float>() + r * k, k, rot);
            std::copy(row.begin(), row.end(), wr.mutable_data_as<float>() + r * k);
          }
          auto q0 = quantize_weight(wr, s, ScaleRule::kFloor, "w");
          ASSERT_TRUE(q0.is_ok());
          EXPECT_EQ(std::memcmp(q->codes.data(), q0->codes.data(), q->codes.nbytes()), 0);
          EXPECT_EQ(std::memcmp(q->scales.data(), q0->scales.data(), q->scales.nbytes()), 0);
        }
        const Tensor wd = stored_weight(*q);
        auto lin = make_mx_linear(*q, ScaleRule::kFloor);
        for (int64_t m : {1, 3, 17}) {
          const auto x = test::activation_like(static_cast<size_t>(m * k),
                                               static_cast<uint32_t>(m * 1000 + k));
          std::vector<float> a;
          for (int64_t i = 0; i < m; ++i) {
            auto r = ref_act(rotated(x.data() + i * k, k, rot).data(), k, s);
            a.insert(a.end(), r.begin(), r.end());
          }
          std::vector<double> yref, bound;
          ref_matmul(a, m, wd, &yref, &bound);
          std::vector<float> y(static_cast<size_t>(m * n));
          lin->forward(x.data(), m, y.data(), ctx);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_LE(std::fabs(y[i] - yref[i]), bound[i])
                << scheme_info(s).name << " m=" << m << " k=" << k << " element " << i;
          }
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 3 * 5 * 5 * 3);
}

TEST(MxScheme, GroupedMatmulMatchesTheReference) {
  ThreadPool pool(2);
  ExecContext ctx(&pool);
  const int64_t h = 240, inter = 47 * 2 + 2;  // I = 96: gmm2 has K = 96 (three blocks)
  const int64_t experts = 4;
  // Expert 1 receives no rows; expert 3 gets 17.
  const std::vector<int64_t> offsets = {0, 3, 3, 4, 21};
  for (int64_t rot : {0, 32, 128}) {
    for (Scheme s : kMxSchemes) {
      std::vector<MxWeights> w13, w2;
      std::vector<Tensor> w13d, w2d;
      for (int64_t e = 0; e < experts; ++e) {
        auto g = quantize_weight(random_weight(inter, h, 10 + e), s, ScaleRule::kFloor, "g",
                                 nullptr, rot);
        auto u = quantize_weight(random_weight(inter, h, 20 + e), s, ScaleRule::kFloor, "u",
                                 nullptr, rot);
        auto d = quantize_weight(random_weight(h, inter, 30 + e), s, ScaleRule::kFloor, "d",
                                 nullptr, rot);
        ASSERT_TRUE(g.is_ok() && u.is_ok() && d.is_ok());
        auto gu = stack_mx_weights({*g, *u}, "gu");
        ASSERT_TRUE(gu.is_ok());
        w13d.push_back(stored_weight(*gu));
        w2d.push_back(stored_weight(*d));
        w13.push_back(*gu);
        w2.push_back(*d);
      }
      auto bank = make_mx_expert_bank(w13, w2, ScaleRule::kFloor, "bank");
      ASSERT_TRUE(bank.is_ok()) << bank.status().to_string();
      const int64_t rows = offsets.back();
      const auto x = test::activation_like(static_cast<size_t>(rows * h), 77);
      ActRows in;
      act_rows_init(RowFormat::mx(s, rot), h, ScaleRule::kFloor, &in);
      in.resize(rows);
      for (int64_t r = 0; r < rows; ++r)
        act_rows_quantize(x.data() + r * h, r, ScaleRule::kFloor, &in);
      std::vector<float> out(static_cast<size_t>(rows * h));
      (*bank)->run(in, offsets.data(), out.data(), ctx);
      EXPECT_EQ((*bank)->gmm1_quantize_passes(), 0u);
      for (int64_t e = 0; e < experts; ++e) {
        const int64_t n = offsets[e + 1] - offsets[e];
        if (n == 0) continue;
        std::vector<float> a;
        for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
          auto ra = ref_act(rotated(x.data() + r * h, h, rot).data(), h, s);
          a.insert(a.end(), ra.begin(), ra.end());
        }
        std::vector<double> gu, bgu;
        ref_matmul(a, n, w13d[static_cast<size_t>(e)], &gu, &bgu);
        // gmm1 epilogue in the reference: SwiGLU in FP32, requantize, dequantize.
        std::vector<float> act;
        for (int64_t r = 0; r < n; ++r) {
          std::vector<float> g(static_cast<size_t>(inter)), u(g.size()), o(g.size());
          for (int64_t j = 0; j < inter; ++j) {
            g[j] = static_cast<float>(gu[r * 2 * inter + j]);
            u[j] = static_cast<float>(gu[r * 2 * inter + inter + j]);
          }
          swiglu(g.data(), u.data(), inter, o.data());
          auto q = ref_act(rotated(o.data(), inter, rot).data(), inter, s);
          act.insert(act.end(), q.begin(), q.end());
        }
        std::vector<double> y, by;
        ref_matmul(act, n, w2d[static_cast<size_t>(e)], &y, &by);
        for (int64_t i = 0; i < n * h; ++i) {
          ASSERT_LE(std::fabs(out[offsets[e] * h + i] - y[i]), by[i])
              << scheme_info(s).name << " expert " << e << " element " << i;
        }
      }
    }
  }
}

// The bank's gmm1 (gate/up GEMM, SwiGLU and requantization fused per tile of columns and
// rows) against the same steps taken whole by dense linears over each expert's weights:
// identical bits. Intermediate widths off the panel (40, 200: the up half starts mid-panel),
// with a partial block (47), past a dual-level chunk (600), and an expert of more rows than a
// tile holds (200).
TEST(MxScheme, FusedGmm1EqualsTheUnfusedStepsBitForBit) {
  ThreadPool pool(2);
  ExecContext serial(nullptr), pooled(&pool);
  const int64_t h = 240, experts = 3;
  const std::vector<int64_t> offsets = {0, 5, 5, 205};
  const int64_t rows = offsets.back();
  const auto x = test::activation_like(static_cast<size_t>(rows * h), 91);
  int cases = 0;
  for (Scheme s : kMxSchemes) {
    for (int64_t inter : {40, 47, 200, 600}) {
      std::vector<MxWeights> w13, w2;
      for (int64_t e = 0; e < experts; ++e) {
        const auto seed = static_cast<uint32_t>(inter * 10 + e);
        auto g = quantize_weight(random_weight(inter, h, seed), s, ScaleRule::kFloor, "g");
        auto u = quantize_weight(random_weight(inter, h, seed + 3), s, ScaleRule::kFloor, "u");
        auto d = quantize_weight(random_weight(h, inter, seed + 6), s, ScaleRule::kFloor, "d");
        ASSERT_TRUE(g.is_ok() && u.is_ok() && d.is_ok());
        auto gu = stack_mx_weights({*g, *u}, "gu");
        ASSERT_TRUE(gu.is_ok());
        w13.push_back(*gu);
        w2.push_back(*d);
      }
      auto bank = make_mx_expert_bank(w13, w2, ScaleRule::kFloor, "bank");
      ASSERT_TRUE(bank.is_ok()) << bank.status().to_string();
      ActRows in;
      act_rows_init(RowFormat::mx(s), h, ScaleRule::kFloor, &in);
      in.resize(rows);
      for (int64_t r = 0; r < rows; ++r)
        act_rows_quantize(x.data() + r * h, r, ScaleRule::kFloor, &in);
      for (ExecContext* c : {&serial, &pooled}) {
        std::vector<float> out(static_cast<size_t>(rows * h));
        (*bank)->run(in, offsets.data(), out.data(), *c);
        for (int64_t e = 0; e < experts; ++e) {
          const int64_t n = offsets[e + 1] - offsets[e];
          if (n == 0) continue;
          auto l13 = make_mx_linear(w13[static_cast<size_t>(e)], ScaleRule::kFloor);
          auto l2 = make_mx_linear(w2[static_cast<size_t>(e)], ScaleRule::kFloor);
          std::vector<float> gu(static_cast<size_t>(n * 2 * inter));
          l13->forward(x.data() + offsets[e] * h, n, gu.data(), serial);
          std::vector<float> act(static_cast<size_t>(n * inter)), y(static_cast<size_t>(n * h));
          for (int64_t r = 0; r < n; ++r)
            swiglu(gu.data() + r * 2 * inter, gu.data() + r * 2 * inter + inter, inter,
                   act.data() + r * inter);
          l2->forward(act.data(), n, y.data(), serial);
          for (int64_t q = 0; q < n * h; ++q) {
            ASSERT_EQ(std::bit_cast<uint32_t>(out[offsets[e] * h + q]),
                      std::bit_cast<uint32_t>(y[static_cast<size_t>(q)]))
                << scheme_info(s).name << " I=" << inter << " expert " << e << " element " << q
                << (c->pool() ? " (pool)" : "");
          }
        }
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 5 * 4 * 2);
}

// The BF16 bank packs gate and up as alternating panels and applies SwiGLU per panel pair:
// an intermediate width that is not a multiple of the panel (I = 41) and an expert without
// rows check the pairing and the padding.
TEST(Bf16Scheme, GroupedMatmulMatchesTheReference) {
  ThreadPool pool(2);
  ExecContext ctx(&pool);
  const int64_t h = 37, inter = 41, experts = 4;
  const std::vector<int64_t> offsets = {0, 3, 3, 4, 21};
  std::vector<Tensor> g, u, d;
  for (int64_t e = 0; e < experts; ++e) {
    g.push_back(random_weight(inter, h, 40 + static_cast<uint32_t>(e)));
    u.push_back(random_weight(inter, h, 50 + static_cast<uint32_t>(e)));
    d.push_back(random_weight(h, inter, 60 + static_cast<uint32_t>(e)));
  }
  auto bank = make_bf16_expert_bank(g, u, d, "bank");
  ASSERT_TRUE(bank.is_ok()) << bank.status().to_string();
  const int64_t rows = offsets.back();
  const auto x = test::activation_like(static_cast<size_t>(rows * h), 78);
  ActRows in;
  act_rows_init(RowFormat::f32(), h, ScaleRule::kFloor, &in);
  in.resize(rows);
  std::copy(x.begin(), x.end(), in.f32.begin());
  std::vector<float> out(static_cast<size_t>(rows * h));
  (*bank)->run(in, offsets.data(), out.data(), ctx);
  auto w = [](const Tensor& t, int64_t i) {
    return bf16_to_float(float_to_bf16(t.data_as<float>()[i]));
  };
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      std::vector<float> act(static_cast<size_t>(inter));
      for (int64_t j = 0; j < inter; ++j) {
        double sg = 0, su = 0;
        for (int64_t q = 0; q < h; ++q) {
          sg += static_cast<double>(x[r * h + q]) * w(g[e], j * h + q);
          su += static_cast<double>(x[r * h + q]) * w(u[e], j * h + q);
        }
        const float gf = static_cast<float>(sg), uf = static_cast<float>(su);
        swiglu(&gf, &uf, 1, &act[j]);
      }
      for (int64_t o = 0; o < h; ++o) {
        double s = 0, mag = 0;
        for (int64_t j = 0; j < inter; ++j) {
          const double p = static_cast<double>(act[j]) * w(d[e], o * inter + j);
          s += p;
          mag += std::fabs(p);
        }
        // FP32 rounding of both GEMMs and of SwiGLU on slightly different inputs.
        ASSERT_LE(std::fabs(out[r * h + o] - s), 1e-5 * mag + 1e-30)
            << "expert " << e << " row " << r << " output " << o;
      }
    }
  }
}

// Activation rows quantize exactly as the formats reference does (codes, block scales and
// dual-level chunk scales), on a width with a partial chunk and a partial block.
TEST(MxScheme, ActivationRowsMatchTheReferenceCodecs) {
  const int64_t k = 1100;
  for (Scheme s : kMxSchemes) {
    const SchemeInfo& info = scheme_info(s);
    const auto x = test::activation_like(static_cast<size_t>(k), 17);
    ActRows a;
    act_rows_init(RowFormat::mx(s), k, ScaleRule::kFloor, &a);
    a.resize(2);
    act_rows_quantize(x.data(), 1, ScaleRule::kFloor, &a);
    if (info.int8_act) {
      // ggml's Q8_0 per 32 (the last block zero-padded): d = amax / 127 as FP16, codes
      // round(x * 127 / amax) half to even.
      const int64_t nb = mx_num_blocks(k);
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t n = std::min<int64_t>(32, k - 32 * b);
        float amax = 0;
        for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
        EXPECT_EQ(a.int8_scales[nb + b], fp16_to_float(float_to_fp16(amax / 127.0f)))
            << "block " << b;
        for (int64_t i = 0; i < 32; ++i) {
          const float want = i < n ? std::nearbyint(x[32 * b + i] * (127.0f / amax)) : 0.0f;
          EXPECT_EQ(static_cast<int8_t>(a.codes[a.row_bytes + 32 * b + i]), want)
              << "block " << b << " element " << i;
        }
      }
      continue;
    }
    std::vector<uint8_t> codes(static_cast<size_t>(k)),
        scales(static_cast<size_t>(mx_num_blocks(k)));
    std::vector<float> s0(static_cast<size_t>(mx_num_chunks(k)));
    if (info.dual) {
      mxfp4_dual_quantize_row(x.data(), k, codes.data(), scales.data(), s0.data());
    } else {
      mx_quantize_row(x.data(), k, info.activation, ScaleRule::kFloor, codes.data(), scales.data());
    }
    std::vector<uint8_t> packed(static_cast<size_t>(a.row_bytes));
    if (info.activation == ElemFormat::kE2M1) {
      fp4_pack(codes.data(), k, Fp4Order::kAdjacent, packed.data());
    } else {
      packed = codes;
    }
    const int64_t nb = mx_num_blocks(k), nc = mx_num_chunks(k);
    EXPECT_EQ(std::vector<uint8_t>(a.codes.begin() + a.row_bytes, a.codes.end()), packed)
        << info.name;
    EXPECT_EQ(std::vector<uint8_t>(a.scales.begin() + nb, a.scales.end()), scales) << info.name;
    if (info.dual) {
      EXPECT_EQ(std::vector<float>(a.chunk_scales.begin() + nc, a.chunk_scales.end()), s0);
    }
  }
}

// Online weight quantization, on a pool, from BF16, F16 and F32 storage and under both scale
// rules: codes, scales and chunk scales bit for bit what the reference codecs give row by row
// on the widened values (blocks of zeros, tiny and huge values included).
TEST(MxScheme, WeightQuantizationMatchesTheReferenceCodecs) {
  ThreadPool pool(2);
  const int64_t n = 67, k = 333;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.05f);
  std::vector<float> base(static_cast<size_t>(n * k));
  for (float& v : base) v = d(rng);
  for (int64_t j = 0; j < 32; ++j) base[static_cast<size_t>(k + j)] = 0.0f;  // a zero block
  for (int64_t j = 64; j < 96; ++j) base[static_cast<size_t>(j)] *= 1e-30f;  // tiny
  for (int64_t j = 128; j < 160; ++j) base[static_cast<size_t>(2 * k + j)] *= 1e30f;  // huge
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    Tensor w = Tensor::empty(dt, {n, k});
    std::vector<float> wide(base.size());
    for (size_t i = 0; i < base.size(); ++i) {
      if (dt == DType::kBF16) {
        w.mutable_data_as<uint16_t>()[i] = float_to_bf16(base[i]);
        wide[i] = bf16_to_float(w.data_as<uint16_t>()[i]);
      } else if (dt == DType::kF16) {
        w.mutable_data_as<uint16_t>()[i] = float_to_fp16(base[i]);
        wide[i] = fp16_to_float(w.data_as<uint16_t>()[i]);
      } else {
        w.mutable_data_as<float>()[i] = wide[i] = base[i];
      }
    }
    for (Scheme s : kMxSchemes) {
      const SchemeInfo& info = scheme_info(s);
      for (ScaleRule rule : {ScaleRule::kFloor, ScaleRule::kRceil}) {
        auto q = quantize_weight(w, s, rule, "w", &pool);
        ASSERT_TRUE(q.is_ok()) << q.status().to_string();
        const int64_t nb = mx_num_blocks(k), nc = mx_num_chunks(k), rb = q->row_bytes();
        std::vector<uint8_t> codes(static_cast<size_t>(k)), packed(static_cast<size_t>(rb));
        std::vector<uint8_t> scales(static_cast<size_t>(nb));
        std::vector<float> s0(static_cast<size_t>(nc));
        for (int64_t r = 0; r < n; ++r) {
          const float* x = wide.data() + r * k;
          if (info.dual) {
            mxfp4_dual_quantize_row(x, k, codes.data(), scales.data(), s0.data());
            for (int64_t c = 0; c < nc; ++c)
              ASSERT_EQ(q->chunk_scales.data_as<float>()[r * nc + c], s0[c]) << r;
          } else {
            mx_quantize_row(x, k, info.weight, rule, codes.data(), scales.data());
          }
          if (info.weight == ElemFormat::kE2M1) {
            fp4_pack(codes.data(), k, Fp4Order::kAdjacent, packed.data());
          } else {
            packed.assign(codes.begin(), codes.end());
          }
          const uint8_t* got = q->codes.data_as<uint8_t>() + r * rb;
          for (int64_t j = 0; j < rb; ++j)
            ASSERT_EQ(got[j], packed[j])
                << info.name << " " << dtype_name(dt) << " row " << r << " byte " << j;
          for (int64_t b = 0; b < nb; ++b)
            ASSERT_EQ(q->scales.data_as<uint8_t>()[r * nb + b], scales[b])
                << info.name << " " << dtype_name(dt) << " row " << r << " block " << b;
        }
      }
    }
  }
}

TEST(MxScheme, SchemeTableAndFlags) {
  EXPECT_EQ(scheme_from_quantization_flag("mxfp8"), Scheme::kW8A8Mxfp8);
  EXPECT_EQ(scheme_from_quantization_flag("mxfp_w4a8"), Scheme::kW4A8Mxfp4);
  EXPECT_EQ(scheme_from_quantization_flag("mxfp4"), Scheme::kW4A4Mxfp4Dual);
  EXPECT_EQ(scheme_from_quantization_flag("w4a4_mxfp4"), Scheme::kW4A4Mxfp4);
  EXPECT_FALSE(scheme_from_quantization_flag("int8").has_value());
  EXPECT_EQ(scheme_from_offline_type("W4A4_MXFP4_DUALSCALE"), Scheme::kW4A4Mxfp4Dual);
  EXPECT_EQ(scheme_from_offline_type("FLOAT"), Scheme::kBf16);
  // The int8-activation scheme's weights are W4A8's: its exports load back as w4a8_mxfp4.
  EXPECT_EQ(scheme_from_quantization_flag("w4a8_mxfp4_int8"), Scheme::kW4A8Mxfp4Int8);
  EXPECT_EQ(scheme_from_offline_type("W4A8_MXFP"), Scheme::kW4A8Mxfp4);
}

// Rows know their format: FP32 rows are not some scheme's, and the int8 rows of
// w4a8_mxfp4_int8 are not W4A8's MXFP8 rows although both schemes hold the same weights.
TEST(MxScheme, RowFormatsAreExplicit) {
  ActRows f32, fp8, int8;
  act_rows_init(RowFormat::f32(), 64, ScaleRule::kFloor, &f32);
  act_rows_init(RowFormat::mx(Scheme::kW4A8Mxfp4), 64, ScaleRule::kFloor, &fp8);
  act_rows_init(RowFormat::mx(Scheme::kW4A8Mxfp4Int8), 64, ScaleRule::kFloor, &int8);
  EXPECT_FALSE(RowFormat::f32().quantized());
  EXPECT_NE(RowFormat::f32(), RowFormat::mx(Scheme::kW8A8Mxfp8));
  EXPECT_TRUE(f32.in_format(RowFormat::f32()));
  EXPECT_FALSE(f32.in_format(RowFormat::mx(Scheme::kW8A8Mxfp8)));
  EXPECT_TRUE(fp8.in_format(RowFormat::mx(Scheme::kW8A8Mxfp8)));
  EXPECT_FALSE(fp8.in_format(RowFormat::f32()));
  EXPECT_FALSE(fp8.in_format(RowFormat::mx(Scheme::kW4A8Mxfp4Int8)));
  EXPECT_TRUE(int8.in_format(RowFormat::mx(Scheme::kW4A8Mxfp4Int8)));
  EXPECT_FALSE(int8.in_format(RowFormat::mx(Scheme::kW4A8Mxfp4)));
  EXPECT_FALSE(fp8.in_format(RowFormat::mx(Scheme::kW4A4Mxfp4)));
}

}  // namespace
}  // namespace mx
