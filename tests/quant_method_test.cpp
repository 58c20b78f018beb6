// The quantization-method registry: which method takes a module's stored weights under each
// load plan (the decisions the loader used to make itself), and the kernel table each module
// reports for its packed weights.
#include "quant/quant_method.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "formats/half.h"
#include "kernels/gemm.h"
#include "kernels/ggml_dot.h"
#include "kernels/ggml_gemm.h"
#include "kernels/mx_gemm.h"

namespace mx {
namespace {

constexpr int64_t kOut = 32, kIn = 64;

Tensor zeros(DType dtype, Shape shape) {
  Tensor t = Tensor::empty(dtype, shape);
  std::memset(t.mutable_data(), 0, t.nbytes());
  return t;
}

StoredWeight float_weight(DType dtype) {
  StoredWeight w;
  w.name = "w.weight";
  w.encoding = WeightEncoding::kFloat;
  w.out = kOut;
  w.in = kIn;
  w.data = zeros(dtype, {kOut, kIn});
  return w;
}

StoredWeight ggml_weight(GgmlType type) {
  StoredWeight w;
  w.name = "w.weight";
  w.encoding = WeightEncoding::kGgml;
  w.ggml = type;
  w.out = kOut;
  w.in = kIn;
  w.data = zeros(DType::kU8, {kOut, ggml_row_bytes(type, kIn)});
  return w;
}

StoredWeight mx_weight() {
  StoredWeight w;
  w.name = "w.weight";
  w.encoding = WeightEncoding::kMx;
  w.mx_type = QuantType::kW8A8Mxfp8;
  w.out = kOut;
  w.in = kIn;
  w.data = zeros(DType::kU8, {kOut, kIn});
  w.scale = zeros(DType::kU8, {kOut, kIn / 32});
  return w;
}

std::string_view method(const StoredWeight& w, const QuantPlan& plan, bool keep_float = false) {
  return quant_method_for({w}, plan, keep_float).name();
}

TEST(QuantMethod, RegistryListsMxThenGgmlThenBf16) {
  std::vector<std::string_view> names;
  for (const QuantMethod* m : quant_methods()) names.push_back(m->name());
  EXPECT_EQ(names, (std::vector<std::string_view>{"mx", "ggml", "bf16"}));
}

TEST(QuantMethod, FloatWeights) {
  QuantPlan plain, online, dequant;
  online.online = Scheme::kW8A8Mxfp8;
  dequant.gguf_dequant_bf16 = true;
  EXPECT_EQ(method(float_weight(DType::kBF16), plain), "bf16");
  EXPECT_EQ(method(float_weight(DType::kBF16), online), "mx");
  EXPECT_EQ(method(float_weight(DType::kBF16), online, /*keep_float=*/true), "bf16");
  // F32 and F16 keep their precision on the ggml kernels, unless everything goes to BF16.
  EXPECT_EQ(method(float_weight(DType::kF32), plain), "ggml");
  EXPECT_EQ(method(float_weight(DType::kF16), plain), "ggml");
  EXPECT_EQ(method(float_weight(DType::kF16), dequant), "bf16");
}

TEST(QuantMethod, GgmlBlocks) {
  QuantPlan plain, online, dequant, f32;
  online.online = Scheme::kW4A8Mxfp4;
  dequant.gguf_dequant_bf16 = true;
  f32.gguf_activations = GgmlActivations::kF32;
  EXPECT_EQ(method(ggml_weight(GgmlType::kQ8_0), plain), "ggml");
  EXPECT_EQ(method(ggml_weight(GgmlType::kQ8_0), online), "mx");
  EXPECT_EQ(method(ggml_weight(GgmlType::kQ8_0), online, /*keep_float=*/true), "ggml");
  EXPECT_EQ(method(ggml_weight(GgmlType::kQ8_0), dequant), "bf16");
  // MXFP4 blocks go to the MX kernels unless the blocks are to stay or become BF16.
  EXPECT_EQ(method(ggml_weight(GgmlType::kMXFP4), plain), "mx");
  EXPECT_EQ(method(ggml_weight(GgmlType::kMXFP4), plain, /*keep_float=*/true), "ggml");
  EXPECT_EQ(method(ggml_weight(GgmlType::kMXFP4), f32), "ggml");
  EXPECT_EQ(method(ggml_weight(GgmlType::kMXFP4), dequant), "bf16");
  // A packed module whose shards are not all MXFP4 keeps its blocks.
  EXPECT_EQ(
      quant_method_for({ggml_weight(GgmlType::kMXFP4), ggml_weight(GgmlType::kQ8_0)}, plain, false)
          .name(),
      "ggml");
}

TEST(QuantMethod, OfflineMxWeightsStayInTheirScheme) {
  QuantPlan plain;
  EXPECT_EQ(method(mx_weight(), plain), "mx");
  EXPECT_EQ(method(mx_weight(), plain, /*keep_float=*/true), "mx");
  auto l = quant_method_for({mx_weight()}, plain, true).create_linear({mx_weight()}, "w", plain);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  EXPECT_EQ((*l)->scheme_name(), "w8a8_mxfp8");
}

TEST(QuantMethod, EveryModuleNamesTheTableThatPackedIt) {
  QuantPlan plain, online, f32;
  online.online = Scheme::kW4A4Mxfp4;
  f32.gguf_activations = GgmlActivations::kF32;
  auto table = [](const StoredWeight& w, const QuantPlan& plan) {
    auto l = quant_method_for({w}, plan, false).create_linear({w}, "w", plan);
    EXPECT_TRUE(l.is_ok()) << l.status().to_string();
    return l.is_ok() ? (*l)->kernel_table() : std::string();
  };
  EXPECT_EQ(table(float_weight(DType::kBF16), plain),
            "gemm:" + std::string(isa_name(gemm_kernels().isa)));
  EXPECT_EQ(table(float_weight(DType::kBF16), online),
            "mx_gemm:" + std::string(mx_gemm_kernels().name));
  EXPECT_EQ(table(ggml_weight(GgmlType::kQ8_0), plain),
            "ggml_dot:" + std::string(isa_name(ggml_dot_kernels().isa)));
  EXPECT_EQ(table(ggml_weight(GgmlType::kQ8_0), f32),
            "ggml_gemm:" + std::string(isa_name(ggml_gemm_kernels().isa)));
}

TEST(QuantMethod, ExpertBanksComeFromTheSameMethods) {
  QuantPlan plain, online;
  online.online = Scheme::kW8A8Mxfp8;
  auto bank = [](const StoredWeight& gu, const StoredWeight& down, const QuantPlan& plan) {
    StoredWeight g = gu, d = down;
    g.out = d.in = kIn / 2;
    g.data = g.data.slice(0, 0, kIn / 2);
    if (d.encoding == WeightEncoding::kGgml) {
      d.data = zeros(DType::kU8, {kIn, ggml_row_bytes(d.ggml, kIn / 2)});
    } else {
      d.data = zeros(d.data.dtype(), {kIn, kIn / 2});
    }
    d.out = kIn;
    ExpertWeights w{{g, g}, {g, g}, {d, d}};
    std::vector<StoredWeight> all = {g, g, g, g, d, d};
    auto b = quant_method_for(all, plan, false).create_expert_bank(w, "layer", plan);
    EXPECT_TRUE(b.is_ok()) << b.status().to_string();
    return b.is_ok() ? (*b)->scheme_name() + " " + (*b)->kernel_table() : std::string();
  };
  const StoredWeight bf16 = float_weight(DType::kBF16);
  const StoredWeight q8 = ggml_weight(GgmlType::kQ8_0);
  EXPECT_EQ(bank(bf16, bf16, plain), "bf16 gemm:" + std::string(isa_name(gemm_kernels().isa)));
  EXPECT_EQ(bank(bf16, bf16, online), "w8a8_mxfp8 mx_gemm:" + std::string(mx_gemm_kernels().name));
  EXPECT_EQ(bank(q8, q8, plain),
            "gguf:Q8_0/Q8_0 ggml_dot:" + std::string(isa_name(ggml_dot_kernels().isa)));
}

TEST(QuantMethod, Bf16LinearEqualsTheSchemeItWraps) {
  StoredWeight w = float_weight(DType::kBF16);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist;
  auto* p = w.data.mutable_data_as<uint16_t>();
  for (int64_t i = 0; i < kOut * kIn; ++i) p[i] = float_to_bf16(dist(rng));
  std::vector<float> x(3 * kIn), a(3 * kOut), b(3 * kOut);
  for (float& v : x) v = dist(rng);
  const QuantPlan plan;
  auto via = quant_method_for({w}, plan, false).create_linear({w}, "w", plan);
  auto direct = make_bf16_linear({w.data}, "w");
  ASSERT_TRUE(via.is_ok() && direct.is_ok());
  ExecContext ctx(nullptr);
  (*via)->forward(x.data(), 3, a.data(), ctx);
  (*direct)->forward(x.data(), 3, b.data(), ctx);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace mx
