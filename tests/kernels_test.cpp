// The generic kernel test: every registered ISA variant of the GEMM and attention tables
// against a scalar reference computed here in double, on odd shapes. Tolerance: FP32
// summation-order rounding, (K + 16) * 2^-23 * sum |a_k * w_k|.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "formats/half.h"
#include "formats/minifloat.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/glu.h"
#include "kernels/mx_gemm.h"
#include "quant/scheme.h"
#include "test_util.h"

namespace mx {
namespace {

const IsaLevel kLevels[] = {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAmx};

// The variant tests below run the AVX-512 tables only where the processor has the level;
// elsewhere this says so, and where it has it, the GEMM tables must be registered.
TEST(Kernels, Avx512TablesRunWhereTheCpuHasThem) {
  if (!isa_supported(IsaLevel::kAvx512)) {
    GTEST_SKIP() << "this CPU lacks AVX-512 (F, BW, VL, DQ with BF16, VNNI and VBMI): the AVX-512 "
                    "kernel variants are not run";
  }
  EXPECT_NE(gemm_kernels_for(IsaLevel::kAvx512), nullptr);
  const MxGemmKernels* mx = mx_gemm_kernels_for(IsaLevel::kAvx512);
  ASSERT_NE(mx, nullptr);
  // The level's E4M3 GEMM on BF16 dot products where they keep the FMA's rate, else on FMAs;
  // the variant tests run both.
  EXPECT_EQ(mx->pack, cpu_features().bf16_dot_at_fma_rate ? &pack_mx_weights_avx512_bf16
                                                          : &pack_mx_weights_avx512);
  int avx512_variants = 0;
  for (const MxGemmKernels* k : mx_gemm_kernel_variants())
    avx512_variants += k->isa == IsaLevel::kAvx512;
  EXPECT_EQ(avx512_variants, 2);
}

// The AMX level (the integer MX GEMMs on tiles) likewise: run where the processor has AMX-TILE
// and AMX-INT8 and the OS grants the tile state, said where it does not.
TEST(Kernels, AmxTablesRunWhereTheCpuHasThem) {
  if (!isa_supported(IsaLevel::kAmx)) {
    GTEST_SKIP() << "this CPU (or OS) offers no AMX-TILE with AMX-INT8: the AMX kernel "
                    "variants are not run";
  }
  const MxGemmKernels* amx = mx_gemm_kernels_for(IsaLevel::kAmx);
  ASSERT_NE(amx, nullptr);
  EXPECT_EQ(amx->pack, &pack_mx_weights_avx512);
  // Families without AMX kernels fall back to their AVX-512 tables.
  EXPECT_EQ(gemm_kernels_for(IsaLevel::kAmx), nullptr);
}

TEST(Kernels, EveryBf16GemmVariant) {
  int variants = 0;
  for (IsaLevel isa : kLevels) {
    const GemmKernels* kern = gemm_kernels_for(isa);
    if (kern == nullptr) continue;
    ++variants;
    // Every row-tile size (1..6), uneven tilings (7, 8, 13, 17 rows) and more rows than one
    // L2 row block (53); a partial panel alone (13 columns) and after full ones (109).
    for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 13, 17, 53}) {
      for (int64_t k : {1, 17, 33, 97, 240, 688}) {
        for (int64_t n : {13, 109}) {
          const auto x =
              test::activation_like(static_cast<size_t>(m * k), static_cast<uint32_t>(m + k));
          const auto wf =
              test::activation_like(static_cast<size_t>(n * k), static_cast<uint32_t>(k + n));
          std::vector<uint16_t> w(wf.size());
          for (size_t i = 0; i < w.size(); ++i) w[i] = float_to_bf16(wf[i]);
          std::vector<uint16_t> packed(static_cast<size_t>(bf16_panel_elems(n, k)));
          kern->pack(w.data(), n, k, k, packed.data());
          std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
          // Two column slices split at a panel boundary, as threads split them.
          const GemmBf16Args a{x.data(), packed.data(), y.data(), m, k, k, n};
          const int64_t split = n > kBf16PanelCols ? kBf16PanelCols : 0;
          if (split > 0) kern->bf16(a, 0, split);
          kern->bf16(a, split, n);
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
              double s = 0, mag = 0;
              for (int64_t q = 0; q < k; ++q) {
                const double p = static_cast<double>(x[i * k + q]) * bf16_to_float(w[j * k + q]);
                s += p;
                mag += std::fabs(p);
              }
              ASSERT_LE(std::fabs(y[i * n + j] - s), (k + 16) * 0x1p-23 * mag + 1e-30)
                  << isa_name(isa) << " m=" << m << " k=" << k << " n=" << n << " (" << i << ", "
                  << j << ")";
            }
          }
        }
      }
    }
  }
  EXPECT_GE(variants, 1);
}

TEST(Kernels, EveryMxGemmVariant) {
  int variants = 0;
  for (const MxGemmKernels* kern : mx_gemm_kernel_variants()) {
    const IsaLevel isa = kern->isa;
    ++variants;
    for (Scheme s : {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4,
                     Scheme::kW4A4Mxfp4Dual, Scheme::kW4A8Mxfp4Int8}) {
      const SchemeInfo& info = scheme_info(s);
      // Int8 activations (ggml's Q8_0 codes, the whole int8 range) run the W4A4 kernels.
      const bool int8 = info.int8_act;
      // Every row tile (1..6) and uneven tilings, the most rows that run direct tiles (12)
      // and the fewest that take the E4M3 wide pass (13), and prefill row blocks past the
      // first (197); one partial panel (11 columns), a partial panel after full ones (75) and
      // panel sets past the first (150); k with partial blocks and chunks.
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 12, 13, 53, 197}) {
        for (int64_t k : {32, 47, 240, 1024, 1100, 3100}) {
          if (m > 100 && k > 500) continue;  // the long k is covered by the smaller m
          // 1024: the padded row stride (mx_decoded_stride), on direct tiles and wide passes.
          if (k == 1024 && m != 1 && m != 13 && m != 53) continue;
          // 3100: more than two groups of blocks in the AMX tiles, past a last partial tile.
          if (k == 3100 && m != 13 && m != 53) continue;
          for (int64_t n : {11, 75, 150}) {
            const auto wf =
                test::activation_like(static_cast<size_t>(n * k), static_cast<uint32_t>(k * 3 + n));
            Tensor wt = Tensor::empty(DType::kF32, {n, k});
            std::copy(wf.begin(), wf.end(), wt.mutable_data_as<float>());
            auto q = quantize_weight(wt, s, ScaleRule::kFloor, "w");
            ASSERT_TRUE(q.is_ok());
            const Tensor wd = dequantize_weight(*q);
            const auto x =
                test::activation_like(static_cast<size_t>(m * k), static_cast<uint32_t>(m * 7 + k));
            ActRows a;
            act_rows_init(RowFormat::mx(s), k, ScaleRule::kFloor, &a);
            a.resize(m);
            for (int64_t r = 0; r < m; ++r)
              act_rows_quantize(x.data() + r * k, r, ScaleRule::kFloor, &a);
            const MxMatrixView av{a.format,
                                  a.codes.data(),
                                  a.scales.data(),
                                  a.dual ? a.chunk_scales.data() : nullptr,
                                  m,
                                  k,
                                  a.row_bytes};
            const int64_t kp = mx_decoded_stride(k);
            const int64_t nb = (k + 31) / 32;
            std::vector<float> af(static_cast<size_t>(m * kp));
            std::vector<int8_t> xq(static_cast<size_t>(m * kp));
            std::vector<int32_t> xsum(static_cast<size_t>(m * nb));
            std::vector<float> xscale(static_cast<size_t>(m * nb));
            if (int8) {
              // Codes as the rows hold them, the block sums, d / 2; decoded: code * d.
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t t = 0; t < k; ++t) {
                  const int8_t c = static_cast<int8_t>(a.codes[i * a.row_bytes + t]);
                  const float d = a.int8_scales[i * nb + t / 32];
                  xq[i * kp + t] = c;
                  xsum[i * nb + t / 32] += c;
                  af[i * kp + t] =
                      static_cast<float>(c * static_cast<double>(d) * kMxGemmInputScale);
                }
                for (int64_t b = 0; b < nb; ++b)
                  xscale[i * nb + b] = 0.5f * a.int8_scales[i * nb + b];
              }
            } else {
              mx_decode_activations(av, af.data(), kMxGemmInputScale);
            }
            const MxMatrixView wv{info.weight,
                                  q->codes.data_as<uint8_t>(),
                                  q->scales.data_as<uint8_t>(),
                                  info.dual ? q->chunk_scales.data_as<float>() : nullptr,
                                  n,
                                  k,
                                  q->row_bytes()};
            const MxPanelWeights packed = kern->pack(wv);
            const MxPanelView& pv = packed.view;
            // W4A4 also runs its integer kernel on the same activations.
            const bool w4a4 = info.activation == ElemFormat::kE2M1 || int8;
            if (w4a4 && !int8)
              mx_prepare_fp4_activations(av, xq.data(), xsum.data(), xscale.data());
            // W4A8 also runs its integer kernel on the 14-bit activations, with what its own
            // table prepares besides them.
            const bool w4a8 = !w4a4 && info.weight == ElemFormat::kE2M1;
            std::vector<int16_t> xh(static_cast<size_t>(m * kp)), xh_ref(xh.size());
            std::vector<int8_t> planes(static_cast<size_t>(2 * m * kp));
            std::vector<int32_t> xhsum(xsum.size());
            // The ISA's own activation decoders: the scalar ones' bits.
            if (info.activation == ElemFormat::kE4M3 && !int8) {
              std::vector<float> af2(af.size());
              kern->decode(av, af2.data(), kMxGemmInputScale);
              ASSERT_EQ(0, std::memcmp(af2.data(), af.data(), af.size() * sizeof(float)))
                  << kern->name << " decode m=" << m << " k=" << k;
              std::vector<float> xs2(xscale.size());
              kern->prepare_w4a8(av, xh.data(), planes.data(), xhsum.data(), xs2.data());
              mx_prepare_fp8_activations_i16(av, xh_ref.data(), xscale.data());
              ASSERT_EQ(xh, xh_ref) << kern->name << " prepare_w4a8 m=" << m << " k=" << k;
              ASSERT_EQ(xs2, xscale) << kern->name << " prepare_w4a8 scales";
              if (!w4a8) std::fill(xscale.begin(), xscale.end(), 0.0f);
            }
            for (int path : {0, 1, 2}) {
              // The FP32 path takes E4M3 weights only.
              if ((path == 0 && info.weight == ElemFormat::kE2M1) || (path == 1 && !w4a4) ||
                  (path == 2 && !w4a8))
                continue;
              std::vector<float> y(static_cast<size_t>(m * n), -1.0f);
              MxGemmArgs args{af.data(), &pv, y.data(), m, kp, n};
              auto* fn = kern->gemm;
              if (path == 1) {
                args = {nullptr, &pv, y.data(), m, kp, n, xq.data(), xsum.data(), xscale.data()};
                fn = kern->gemm_w4a4;
              }
              if (path == 2) {
                args.x = nullptr;
                args.xh = xh.data();
                args.xhb = planes.data();
                args.xsum = xhsum.data();
                args.xscale = xscale.data();
                fn = kern->gemm_w4a8;
              }
              // Two column slices split at a panel boundary, as threads split them.
              const int64_t split = n > kMxPanelCols ? kMxPanelCols : 0;
              if (split > 0) fn(args, 0, split);
              fn(args, split, n);
              // Every ISA runs the scalar kernels' operations per output in their order (one
              // FMA chain per block, or an exact integer dot, then the same scaling), so each
              // gives the scalar kernel's bits, from whatever else its table prepared.
              if (isa != IsaLevel::kScalar) {
                const MxGemmKernels* ref = mx_gemm_kernels_for(IsaLevel::kScalar);
                // Each table reads the panels its own packer lays out.
                const MxPanelWeights ref_packed = ref->pack(wv);
                std::vector<float> y0(y.size(), -1.0f);
                MxGemmArgs r = args;
                r.w = &ref_packed.view;
                r.y = y0.data();
                if (path == 2) r.xh = xh_ref.data();
                (path == 0 ? ref->gemm : path == 1 ? ref->gemm_w4a4 : ref->gemm_w4a8)(r, 0, n);
                ASSERT_EQ(0, std::memcmp(y0.data(), y.data(), y.size() * sizeof(float)))
                    << kern->name << " " << info.name << " path " << path << " m=" << m
                    << " k=" << k << " n=" << n;
              }
              // A row alone gives the same bits as in the batch (the vector kernels run
              // other tile shapes, and prefill paths, for one row than for many).
              for (int64_t i : {int64_t{0}, m - 1}) {
                std::vector<float> y1(static_cast<size_t>(n));
                MxGemmArgs one = args;
                one.m = 1;
                one.y = y1.data();
                one.x = path == 0 ? af.data() + i * kp : nullptr;
                if (path == 1) {
                  one.xq = xq.data() + i * kp;
                  one.xsum = xsum.data() + i * nb;
                  one.xscale = xscale.data() + i * nb;
                }
                if (path == 2) {
                  one.xh = xh.data() + i * kp;
                  one.xhb = planes.data() + i * 2 * kp;
                  one.xsum = xhsum.data() + i * nb;
                  one.xscale = xscale.data() + i * nb;
                }
                fn(one, 0, n);
                for (int64_t j = 0; j < n; ++j)
                  ASSERT_EQ(y1[j], y[i * n + j]) << kern->name << " " << info.name << " m=" << m
                                                 << " k=" << k << " row " << i << " col " << j;
              }
              // Reference: the activations as decoded (block and chunk scales applied) times
              // the reference-dequantized weights, in double.
              for (int64_t i = 0; i < m; ++i) {
                for (int64_t j = 0; j < n; ++j) {
                  double sum = 0, mag = 0;
                  for (int64_t t = 0; t < k; ++t) {
                    // W4A8's int16 path: the 14-bit activations it consumes (k0, k2, k1, k3
                    // within each four), times 2^-5 and the block scale.
                    const int64_t at = (t & ~int64_t{3}) + ((t & 1) << 1) + ((t >> 1) & 1);
                    const double xv = path == 2
                                          ? xh_ref[i * kp + at] *
                                                static_cast<double>(xscale[i * nb + t / 32]) * 0x1p9
                                          : static_cast<double>(af[i * kp + t]) / kMxGemmInputScale;
                    const double p = xv * wd.data_as<float>()[j * k + t];
                    sum += p;
                    mag += std::fabs(p);
                  }
                  ASSERT_LE(std::fabs(y[i * n + j] - sum), (k + 16) * 0x1p-23 * mag + 1e-30)
                      << kern->name << " " << info.name << " path " << path << " m=" << m
                      << " k=" << k << " n=" << n << " (" << i << ", " << j << ")";
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(variants, 1);
}

// W4A8's 14-bit activations against the E4M3 codec: every code exact from 0.25 up, within
// 2^-6 below, in the order k0, k2, k1, k3 of each four; block scales 2^(s - 141).
TEST(Kernels, W4a8ActivationsHoldEveryE4m3CodeWithinTheBound) {
  const int64_t k = 256;
  std::vector<uint8_t> codes(k);
  for (int64_t c = 0; c < k; ++c) codes[c] = static_cast<uint8_t>(c);
  const std::vector<uint8_t> scales = {0, 127, 141, 254, 127, 127, 127, 127};
  const MxMatrixView v{ElemFormat::kE4M3, codes.data(), scales.data(), nullptr, 1, k, k};
  std::vector<int16_t> q(k);
  std::vector<float> xs(k / 32);
  mx_prepare_fp8_activations_i16(v, q.data(), xs.data());
  for (int64_t b = 0; b < k / 32; ++b) EXPECT_EQ(xs[b], std::ldexp(1.0f, scales[b] - 141));
  // Every ISA's decoders give the scalar ones' values for every code, NaN codes included.
  std::vector<float> f(k);
  mx_decode_activations(v, f.data(), 1.0f);
  for (const MxGemmKernels* kern : mx_gemm_kernel_variants()) {
    std::vector<int16_t> q2(k);
    std::vector<int8_t> planes(2 * k);
    std::vector<int32_t> sums(k / 32);
    std::vector<float> xs2(k / 32), f2(k);
    kern->prepare_w4a8(v, q2.data(), planes.data(), sums.data(), xs2.data());
    EXPECT_EQ(q2, q) << kern->name;
    EXPECT_EQ(xs2, xs) << kern->name;
    kern->decode(v, f2.data(), 1.0f);
    for (int64_t c = 0; c < k; ++c) {
      if (std::isnan(f[c])) {
        EXPECT_TRUE(std::isnan(f2[c])) << kern->name << " code " << c;
      } else {
        EXPECT_EQ(f2[c], f[c]) << kern->name << " code " << c;
      }
    }
  }
  const float* e4m3 = e4m3_table();
  for (int64_t c = 0; c < k; ++c) {
    if (std::isnan(e4m3[c])) continue;
    const int64_t at = c / 4 * 4 + std::array<int, 4>{0, 2, 1, 3}[c % 4];
    const double got = q[at] / 32.0, want = e4m3[c];
    if (std::fabs(want) >= 0.25) {
      EXPECT_EQ(got, want) << "code " << c;
    } else {
      EXPECT_LE(std::fabs(got - want), 0x1p-6) << "code " << c;
    }
  }
}

// Scales too large for the folded exponent take the post factor: weights of 2^100 (E8M0
// exponent above 200, or a dual-level chunk scale near 2^97) still multiply correctly.
TEST(Kernels, MxGemmWithLargeWeightScales) {
  for (const MxGemmKernels* kern : mx_gemm_kernel_variants()) {
    const char* isa = kern->name;
    for (Scheme s :
         {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4, Scheme::kW4A4Mxfp4Dual}) {
      const SchemeInfo& info = scheme_info(s);
      const int64_t n = 3, k = 64;
      Tensor wt = Tensor::empty(DType::kF32, {n, k});
      float* wp = wt.mutable_data_as<float>();
      for (int64_t i = 0; i < n * k; ++i)
        wp[i] = (i % 5 == 0 ? 0x1p100f : 0x1p-3f) * (i % 2 ? -1 : 1);
      auto q = quantize_weight(wt, s, ScaleRule::kFloor, "w");
      ASSERT_TRUE(q.is_ok());
      const Tensor wd = dequantize_weight(*q);
      const float* cs = info.dual ? q->chunk_scales.data_as<float>() : nullptr;
      const MxMatrixView wv{
          info.weight,   q->codes.data_as<uint8_t>(), q->scales.data_as<uint8_t>(), cs, n, k,
          q->row_bytes()};
      const MxPanelWeights packed = kern->pack(wv);
      const MxPanelView& pv = packed.view;
      EXPECT_GT(pv.post, 1.0f);
      // Small integers, which every activation format holds exactly.
      std::vector<float> x(static_cast<size_t>(k));
      for (int64_t t = 0; t < k; ++t) x[t] = static_cast<float>(t % 7) - 3.0f;
      ActRows a;
      act_rows_init(RowFormat::mx(s), k, ScaleRule::kFloor, &a);
      a.resize(1);
      act_rows_quantize(x.data(), 0, ScaleRule::kFloor, &a);
      const MxMatrixView av{
          a.format, a.codes.data(), a.scales.data(), a.dual ? a.chunk_scales.data() : nullptr, 1,
          k,        a.row_bytes};
      std::vector<float> xs(static_cast<size_t>(k)), xscale(2);
      std::vector<int8_t> xq(static_cast<size_t>(k));
      std::vector<int16_t> xh(static_cast<size_t>(k));
      std::vector<int32_t> xsum(2);
      std::vector<float> y(static_cast<size_t>(n));
      if (s == Scheme::kW8A8Mxfp8) {
        mx_decode_activations(av, xs.data(), kMxGemmInputScale);
        kern->gemm({xs.data(), &pv, y.data(), 1, k, n}, 0, n);
      } else if (s == Scheme::kW4A8Mxfp4) {
        std::vector<int8_t> planes(static_cast<size_t>(2 * k));
        kern->prepare_w4a8(av, xh.data(), planes.data(), xsum.data(), xscale.data());
        MxGemmArgs g{nullptr, &pv, y.data(), 1, k, n};
        g.xh = xh.data();
        g.xhb = planes.data();
        g.xsum = xsum.data();
        g.xscale = xscale.data();
        kern->gemm_w4a8(g, 0, n);
      } else {
        mx_prepare_fp4_activations(av, xq.data(), xsum.data(), xscale.data());
        kern->gemm_w4a4({nullptr, &pv, y.data(), 1, k, n, xq.data(), xsum.data(), xscale.data()}, 0,
                        n);
      }
      for (int64_t j = 0; j < n; ++j) {
        double ref = 0, mag = 0;
        for (int64_t t = 0; t < k; ++t) {
          const double p = static_cast<double>(x[t]) * wd.data_as<float>()[j * k + t];
          ref += p;
          mag += std::fabs(p);
        }
        EXPECT_GT(mag, 1e30);
        EXPECT_NEAR(y[j], ref, (k + 16) * 0x1p-23 * mag) << isa << " " << info.name << " " << j;
      }
    }
  }
}

// E4M3 weights (with subnormal codes) against activation rows so small that the FP32 chains'
// products are subnormal, at the edge of that, and large: every table gives the scalar
// kernel's bits, a row alone as in the batch. Dot products that treat subnormals as zero (the
// AVX-512 table's BF16 ones) must not run on the small rows.
TEST(Kernels, MxGemmE4m3AtExtremeActivationScales) {
  const int64_t n = 40, k = 100, kp = mx_decoded_stride(k);
  const float row_scale[] = {1.0f, 0x1p-72f, 0x1p-58f, 0x1p-50f, 0x1p40f};
  Tensor wt = Tensor::empty(DType::kF32, {n, k});
  const auto wf = test::activation_like(static_cast<size_t>(n * k), 11);
  for (int64_t i = 0; i < n * k; ++i)
    wt.mutable_data_as<float>()[i] = std::ldexp(wf[static_cast<size_t>(i)], -(i % 13));
  auto q = quantize_weight(wt, Scheme::kW8A8Mxfp8, ScaleRule::kFloor, "w");
  ASSERT_TRUE(q.is_ok());
  int subnormal_codes = 0;
  for (int64_t i = 0; i < n * k; ++i) {
    const uint8_t c = q->codes.data_as<uint8_t>()[i];
    subnormal_codes += (c & 0x78) == 0 && (c & 7) != 0;
  }
  EXPECT_GT(subnormal_codes, 0);
  const MxMatrixView wv{
      ElemFormat::kE4M3, q->codes.data_as<uint8_t>(), q->scales.data_as<uint8_t>(), nullptr, n, k,
      q->row_bytes()};
  for (int64_t m : {1, 3, 13}) {
    for (int first = 0; first < 5; ++first) {
      // Row r at row_scale[(first + r) % 5]: each scale alone (m = 1) and mixed.
      const auto x = test::activation_like(static_cast<size_t>(m * k), static_cast<uint32_t>(m));
      ActRows a;
      act_rows_init(RowFormat::mx(Scheme::kW8A8Mxfp8), k, ScaleRule::kFloor, &a);
      a.resize(m);
      std::vector<float> xr(static_cast<size_t>(k));
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t t = 0; t < k; ++t) xr[t] = x[r * k + t] * row_scale[(first + r) % 5];
        act_rows_quantize(xr.data(), r, ScaleRule::kFloor, &a);
      }
      const MxMatrixView av{a.format, a.codes.data(), a.scales.data(), nullptr, m, k, a.row_bytes};
      std::vector<float> af(static_cast<size_t>(m * kp));
      mx_decode_activations(av, af.data(), kMxGemmInputScale);
      std::vector<float> y0(static_cast<size_t>(m * n), -1.0f);
      const MxGemmKernels* ref = mx_gemm_kernels_for(IsaLevel::kScalar);
      const MxPanelWeights ref_packed = ref->pack(wv);
      ref->gemm({af.data(), &ref_packed.view, y0.data(), m, kp, n}, 0, n);
      for (const MxGemmKernels* kern : mx_gemm_kernel_variants()) {
        if (kern->isa == IsaLevel::kScalar) continue;
        const MxPanelWeights packed = kern->pack(wv);
        std::vector<float> y(y0.size(), -1.0f);
        kern->gemm({af.data(), &packed.view, y.data(), m, kp, n}, 0, n);
        ASSERT_EQ(0, std::memcmp(y0.data(), y.data(), y.size() * sizeof(float)))
            << kern->name << " m=" << m << " first scale " << row_scale[first];
        for (int64_t r = 0; r < m; ++r) {
          std::vector<float> y1(static_cast<size_t>(n), -1.0f);
          kern->gemm({af.data() + r * kp, &packed.view, y1.data(), 1, kp, n}, 0, n);
          ASSERT_EQ(0, std::memcmp(y0.data() + r * n, y1.data(), y1.size() * sizeof(float)))
              << kern->name << " row " << r << " of m=" << m;
        }
      }
    }
  }
}

// One row of E2M1 weights (W4A4, W4A8), where the vector tables build each block's scale as an
// exponent when every scale stays normal (mx_one_row_scale_exps): weight blocks from 2^-126
// (stored scales at the edge of the range) through 2^-40 and 2^100 (scales rebased by the post
// factor), against rows from 2^-126 to 2^110. Whichever way a table scales, it gives the
// scalar kernel's bits.
TEST(Kernels, OneRowIntegerGemmAtScaleExtremes) {
  const int64_t n = 40, k = 96, nb = k / 32, kp = mx_decoded_stride(k);
  const int weight_exps[3][3] = {{-126, -124, -1}, {-40, 0, 30}, {-20, 60, 100}};
  const int row_exps[] = {-126, -100, -60, 0, 60, 110};
  const auto wf = test::activation_like(static_cast<size_t>(n * k), 5);
  const auto xf = test::activation_like(static_cast<size_t>(k), 6);
  for (Scheme s : {Scheme::kW4A4Mxfp4, Scheme::kW4A8Mxfp4}) {
    for (const auto& exps : weight_exps) {
      Tensor wt = Tensor::empty(DType::kF32, {n, k});
      for (int64_t i = 0; i < n * k; ++i) {
        const int e = exps[(i / k + i % k / 32) % 3];
        wt.mutable_data_as<float>()[i] = std::ldexp(wf[static_cast<size_t>(i)], e);
      }
      auto q = quantize_weight(wt, s, ScaleRule::kFloor, "w");
      ASSERT_TRUE(q.is_ok());
      const MxMatrixView wv{ElemFormat::kE2M1,
                            q->codes.data_as<uint8_t>(),
                            q->scales.data_as<uint8_t>(),
                            nullptr,
                            n,
                            k,
                            q->row_bytes()};
      for (int e : row_exps) {
        std::vector<float> xr(static_cast<size_t>(k));
        for (int64_t t = 0; t < k; ++t) xr[t] = std::ldexp(xf[static_cast<size_t>(t)], e);
        ActRows a;
        act_rows_init(RowFormat::mx(s), k, ScaleRule::kFloor, &a);
        a.resize(1);
        act_rows_quantize(xr.data(), 0, ScaleRule::kFloor, &a);
        const MxMatrixView av{a.format, a.codes.data(), a.scales.data(), nullptr, 1,
                              k,        a.row_bytes};
        std::vector<int8_t> xq(static_cast<size_t>(kp)), planes(static_cast<size_t>(2 * kp));
        std::vector<int16_t> xh(static_cast<size_t>(kp)), xh_ref(xh.size());
        std::vector<int32_t> xsum(static_cast<size_t>(nb)), xsum_ref(xsum.size());
        std::vector<float> xscale(static_cast<size_t>(nb));
        const bool w4a8 = s == Scheme::kW4A8Mxfp4;
        if (w4a8) {
          mx_prepare_fp8_activations_i16(av, xh_ref.data(), xscale.data());
        } else {
          mx_prepare_fp4_activations(av, xq.data(), xsum.data(), xscale.data());
        }
        auto run = [&](const MxGemmKernels* kern, const int16_t* h, float* y) {
          const MxPanelWeights packed = kern->pack(wv);
          MxGemmArgs g{nullptr, &packed.view, y, 1, kp, n, xq.data(), xsum.data(), xscale.data()};
          if (w4a8) {
            g.xh = h;
            g.xhb = planes.data();
            kern->gemm_w4a8(g, 0, n);
          } else {
            kern->gemm_w4a4(g, 0, n);
          }
        };
        std::vector<float> y0(static_cast<size_t>(n), -1.0f);
        run(mx_gemm_kernels_for(IsaLevel::kScalar), xh_ref.data(), y0.data());
        for (const MxGemmKernels* kern : mx_gemm_kernel_variants()) {
          if (kern->isa == IsaLevel::kScalar) continue;
          std::vector<float> scales(xscale.size());
          if (w4a8) kern->prepare_w4a8(av, xh.data(), planes.data(), xsum.data(), scales.data());
          std::vector<float> y(y0.size(), -1.0f);
          run(kern, xh.data(), y.data());
          ASSERT_EQ(0, std::memcmp(y0.data(), y.data(), y.size() * sizeof(float)))
              << kern->name << " " << scheme_info(s).name << " weights 2^" << exps[0]
              << ".. rows 2^" << e;
        }
      }
    }
  }
}

// `rows` rows of g query heads (queries [rows][g * d]) from len0 through fn, one of a table's
// group_paged variants: out [rows][g * d].
std::vector<float> attend_rows(const std::function<void(const AttentionRows&)>& fn, const float* q,
                               int64_t rows, int64_t g, int64_t len0, int64_t bs, int64_t ld,
                               int64_t d, float scale) {
  std::vector<float> scratch(
      static_cast<size_t>(attention_scratch_floats(rows, g, len0 + rows - 1, d)), NAN);
  std::vector<float> out(static_cast<size_t>(rows * g * d), -1.0f);
  fn(AttentionRows{q, g * d, out.data(), g * d, rows, g, len0, bs, ld, d, scale, scratch.data()});
  return out;
}

// Attention over a paged cache with shuffled blocks: one row of one head against scores, a
// softmax and the value sum in double (tolerance: relative 1e-5 of the largest |value|, FP32
// sums of a few hundred terms and the vectorized exp); then rows of grouped heads, each (row,
// head) bit for bit what it gives alone, and BF16 and FP8 caches bit for bit what the FP32
// kernel gives on their values.
TEST(Kernels, EveryAttentionVariant) {
  int variants = 0;
  for (IsaLevel isa : kLevels) {
    const AttentionKernels* kern = attention_kernels_for(isa);
    if (kern == nullptr) continue;
    ++variants;
    for (int64_t d : {8, 20, 64, 72, 128}) {
      for (int64_t len : {1, 7, 9, 33, 300}) {
        for (int64_t bs : {1, 16}) {
          const int64_t ld = d + 5, nblk = (len + bs - 1) / bs;
          const auto kv = test::activation_like(static_cast<size_t>(2 * nblk * bs * ld),
                                                static_cast<uint32_t>(d * 31 + len));
          const auto q = test::activation_like(static_cast<size_t>(d), static_cast<uint32_t>(len));
          std::vector<const float*> kb(static_cast<size_t>(nblk)), vb(kb.size());
          for (int64_t b = 0; b < nblk; ++b) {  // blocks in reverse order: a real indirection
            kb[b] = kv.data() + (nblk - 1 - b) * bs * ld;
            vb[b] = kv.data() + (nblk + b) * bs * ld;
          }
          const float scale = 1.0f / std::sqrt(static_cast<float>(d));
          auto fp32 = [&](const std::vector<const float*>& k, const std::vector<const float*>& v) {
            return [&, k, v](const AttentionRows& a) { kern->group_paged(a, k.data(), v.data()); };
          };
          const std::vector<float> out =
              attend_rows(fp32(kb, vb), q.data(), 1, 1, len, bs, ld, d, scale);
          std::vector<double> p(static_cast<size_t>(len));
          double mx = -1e300, sum = 0, vmax = 0;
          for (int64_t t = 0; t < len; ++t) {
            const float* kt = kb[t / bs] + (t % bs) * ld;
            double s = 0;
            for (int64_t j = 0; j < d; ++j) s += static_cast<double>(q[j]) * kt[j];
            p[t] = s * scale;
            mx = std::max(mx, p[t]);
          }
          for (double& x : p) sum += x = std::exp(x - mx);
          for (int64_t j = 0; j < d; ++j) {
            double o = 0;
            for (int64_t t = 0; t < len; ++t) {
              const double v = vb[t / bs][(t % bs) * ld + j];
              o += p[t] / sum * v;
              vmax = std::max(vmax, std::fabs(v));
            }
            ASSERT_NEAR(out[j], o, 1e-5 * vmax)
                << isa_name(isa) << " d=" << d << " len=" << len << " bs=" << bs << " col " << j;
          }
          // Rows of a group of query heads over the same keys and values, the last row seeing
          // all len positions (groups past eight heads run in parts; sixteen rows, the most a
          // call takes, span chunks of positions at len 300).
          for (int64_t g : {1, 2, 3, 5, 8, 12}) {
            const int64_t rows = std::min<int64_t>(len, g == 8 ? kAttentionMaxRows : 3);
            const int64_t len0 = len - rows + 1;
            const auto qg = test::activation_like(static_cast<size_t>(rows * g * d),
                                                  static_cast<uint32_t>(len * 3 + g));
            const std::vector<float> go =
                attend_rows(fp32(kb, vb), qg.data(), rows, g, len0, bs, ld, d, scale);
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t h = 0; h < g; ++h) {
                const std::vector<float> one = attend_rows(
                    fp32(kb, vb), qg.data() + (r * g + h) * d, 1, 1, len0 + r, bs, ld, d, scale);
                for (int64_t j = 0; j < d; ++j)
                  ASSERT_EQ(go[(r * g + h) * d + j], one[j])
                      << isa_name(isa) << " group " << g << " row " << r << " head " << h
                      << " d=" << d << " len=" << len << " bs=" << bs;
              }
            }
            // A BF16 cache: bit for bit what group_paged gives on the same values in FP32.
            std::vector<uint16_t> kv16(kv.size());
            std::vector<float> kvr(kv.size());
            for (size_t i = 0; i < kv.size(); ++i) {
              kv16[i] = float_to_bf16(kv[i]);
              kvr[i] = bf16_to_float(kv16[i]);
            }
            std::vector<const uint16_t*> kb16(kb.size()), vb16(kb.size());
            std::vector<const float*> kbr(kb.size()), vbr(kb.size());
            for (size_t b = 0; b < kb.size(); ++b) {
              kb16[b] = kv16.data() + (kb[b] - kv.data());
              vb16[b] = kv16.data() + (vb[b] - kv.data());
              kbr[b] = kvr.data() + (kb[b] - kv.data());
              vbr[b] = kvr.data() + (vb[b] - kv.data());
            }
            const std::vector<float> o16 = attend_rows(
                [&](const AttentionRows& a) {
                  kern->group_paged_bf16(a, kb16.data(), vb16.data());
                },
                qg.data(), rows, g, len0, bs, ld, d, scale);
            const std::vector<float> or16 =
                attend_rows(fp32(kbr, vbr), qg.data(), rows, g, len0, bs, ld, d, scale);
            for (size_t j = 0; j < o16.size(); ++j)
              ASSERT_EQ(o16[j], or16[j]) << isa_name(isa) << " bf16 group " << g << " d=" << d
                                         << " len=" << len << " at " << j;
            // An FP8 cache: each row's E4M3 codes under its power-of-two scale (the largest
            // element in [256, 512)), bit for bit what group_paged gives on the same values
            // widened to FP32, where nothing nears FP32's subnormals (the scale then moves
            // from the elements to the score and the softmax weight exactly); the test data's
            // rows of magnitude 1e-40 stay within 2^-120 there.
            const int64_t kv_rows = static_cast<int64_t>(kv.size()) / ld;
            std::vector<uint8_t> kv8(kv.size(), 0);
            std::vector<float> rs(static_cast<size_t>(kv_rows)), kv8r(kv.size(), 0.0f);
            for (int64_t r = 0; r < kv_rows; ++r) {
              float amax = 0.0f;
              for (int64_t j = 0; j < d; ++j) amax = std::max(amax, std::fabs(kv[r * ld + j]));
              int e = 0;
              std::frexp(amax, &e);
              rs[r] = std::ldexp(1.0f, e - 1 - 8);
              for (int64_t j = 0; j < d; ++j) {
                kv8[r * ld + j] = float_to_e4m3(kv[r * ld + j] / rs[r]);
                kv8r[r * ld + j] = e4m3_to_float(kv8[r * ld + j]) * rs[r];
              }
            }
            std::vector<const uint8_t*> kb8(kb.size()), vb8(kb.size());
            std::vector<const float*> ks8(kb.size()), vs8(kb.size());
            for (size_t b = 0; b < kb.size(); ++b) {
              kb8[b] = kv8.data() + (kb[b] - kv.data());
              vb8[b] = kv8.data() + (vb[b] - kv.data());
              ks8[b] = rs.data() + (kb[b] - kv.data()) / ld;
              vs8[b] = rs.data() + (vb[b] - kv.data()) / ld;
              kbr[b] = kv8r.data() + (kb[b] - kv.data());
              vbr[b] = kv8r.data() + (vb[b] - kv.data());
            }
            const std::vector<float> o8 = attend_rows(
                [&](const AttentionRows& a) {
                  kern->group_paged_fp8(a, kb8.data(), vb8.data(), ks8.data(), vs8.data());
                },
                qg.data(), rows, g, len0, bs, ld, d, scale);
            const std::vector<float> or8 =
                attend_rows(fp32(kbr, vbr), qg.data(), rows, g, len0, bs, ld, d, scale);
            for (size_t j = 0; j < o8.size(); ++j) {
              if (std::fabs(or8[j]) >= 0x1p-100f) {
                ASSERT_EQ(o8[j], or8[j]) << isa_name(isa) << " fp8 group " << g << " d=" << d
                                         << " len=" << len << " bs=" << bs << " at " << j;
              } else {
                ASSERT_NEAR(o8[j], or8[j], 0x1p-120f) << isa_name(isa) << " fp8 group " << g;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GE(variants, 1);
}

// SwiGLU and the sigmoid gate: every table against silu(g) * u and u * sigmoid(g) evaluated in
// double, on odd lengths (the vector tables' tails), gates across the range of exp (where exp(-g)
// leaves FP32's range, the result is FP32's: zero), in place as the MLPs call it. Tolerance: 4 ulp
// of the result (the polynomial's and the division's roundings), or 1e-36 absolute near zero.
TEST(Kernels, EveryGluVariant) {
  int variants = 0;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f), near(-8.0f, 8.0f);
  for (IsaLevel isa : kLevels) {
    const GluKernels* kern = glu_kernels_for(isa);
    if (kern == nullptr) continue;
    ++variants;
    for (int64_t n : {1, 7, 8, 15, 16, 17, 33, 100, 257}) {
      std::vector<float> g(static_cast<size_t>(n)), u(g.size());
      for (int64_t i = 0; i < n; ++i) {
        g[i] = i % 3 == 0 ? wide(rng) : near(rng);
        u[i] = near(rng);
      }
      if (n > 8) {
        g[1] = 0.0f;
        g[2] = -0.0f;
        g[3] = 87.0f;
        g[4] = -89.0f;
        g[5] = 1e-30f;
      }
      if (n > 8) g[6] = std::numeric_limits<float>::quiet_NaN();  // runs through as NaN
      std::vector<float> out(g.size()), inplace = g, gated = u;
      kern->swiglu(g.data(), u.data(), n, out.data());
      kern->swiglu(inplace.data(), u.data(), n, inplace.data());
      kern->sigmoid_gate(g.data(), n, gated.data());
      for (int64_t i = 0; i < n; ++i) {
        // exp(-g) past FP32's largest value is infinite in FP32, and silu(g) then -0.
        if (std::isnan(g[i])) {
          ASSERT_TRUE(std::isnan(out[i]) && std::isnan(gated[i])) << isa_name(isa) << " NaN gate";
          continue;
        }
        const double gd = g[i], e = std::exp(-gd);
        const bool inf = e > std::numeric_limits<float>::max();
        const double ref = inf ? 0.0 : gd / (1.0 + e) * u[i];
        const double tol = std::max(4.0 * std::ldexp(1.0, -23) * std::fabs(ref), 1e-36);
        ASSERT_NEAR(out[i], ref, tol) << isa_name(isa) << " n=" << n << " g=" << g[i];
        ASSERT_EQ(inplace[i], out[i]) << isa_name(isa) << " in place, n=" << n << " i=" << i;
        const double sref = inf ? 0.0 : u[i] / (1.0 + e);
        ASSERT_NEAR(gated[i], sref, std::max(4.0 * std::ldexp(1.0, -23) * std::fabs(sref), 1e-36))
            << isa_name(isa) << " sigmoid gate, n=" << n << " g=" << g[i];
      }
    }
  }
  EXPECT_GE(variants, 2);
}

}  // namespace
}  // namespace mx
