// Qwen3.5 checkpoints beyond the goldens: online MX schemes against the FP32 reference (KL,
// for the record), `quantize` + offline load against online quantization, and the errors a
// damaged checkpoint gets.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "export_check.h"
#include "kernels/ops.h"
#include "loader/model_config.h"
#include "loader/safetensors.h"
#include "model/export.h"
#include "model/model.h"
#include "model/packed_modules.h"
#include "test_util.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

std::string fixture(const char* name) { return test::shared_dir() + "/fixtures/" + name; }

using test::logits_of;

const Scheme kSchemes[] = {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4,
                           Scheme::kW4A4Mxfp4Dual};

// Every MX scheme online, every linear quantized (in_proj_b/a, the shared-expert gate, the
// router, embeddings and lm_head as stored): KL against the FP32 reference's logits.
TEST(Hybrid, EverySchemeRunsAgainstTheReference) {
  const std::string dir = fixture("tiny-qwen3_5-moe");
  auto golden = read_json_file(dir + "/golden/golden.json");
  ASSERT_TRUE(golden.is_ok());
  auto ref = SafetensorsFile::open(dir + "/golden/logits.safetensors");
  ASSERT_TRUE(ref.is_ok());
  for (Scheme s : kSchemes) {
    LoadOptions opt;
    opt.threads = 2;
    opt.quantization = s;
    auto m = load_model(dir, opt);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    const int64_t vocab = (*m)->config().vocab_size;
    EXPECT_NE((*m)->scheme_summary().find(scheme_info(s).name), std::string::npos);
    double kl = 0;
    int64_t positions = 0;
    for (const Json& p : (*golden)["prompts"]) {
      const auto ids = p["input_ids"].get<std::vector<int32_t>>();
      auto r = ref->tensor(p["logits_tensor"].get<std::string>());
      ASSERT_TRUE(r.is_ok());
      const auto q = logits_of(**m, ids);
      std::vector<float> lr(static_cast<size_t>(vocab)), lq(lr.size());
      for (size_t t = 0; t < ids.size(); ++t, ++positions) {
        log_softmax(r->data_as<float>() + t * vocab, vocab, lr.data());
        log_softmax(q.data() + t * vocab, vocab, lq.data());
        for (int64_t v = 0; v < vocab; ++v) kl += std::exp(lr[v]) * (lr[v] - lq[v]);
      }
    }
    kl /= static_cast<double>(positions);
    std::printf(
        "tiny-qwen3_5-moe %s: mean KL against the FP32 reference %.4f over %lld "
        "positions\n",
        std::string(scheme_info(s).name).c_str(), kl, static_cast<long long>(positions));
    EXPECT_TRUE(std::isfinite(kl));
    EXPECT_GT(kl, 0.0);
  }
}

// quantize writes the msmodelslim layout (fused experts saved per expert); loading it with no
// flag gives online quantization's logits bit for bit.
TEST(Hybrid, QuantizeThenOfflineEqualsOnline) {
  test::expect_offline_equals_online(
      fixture("tiny-qwen3_5-moe"), test::temp_dir("q35"), Scheme::kW8A8Mxfp8,
      {{"model.language_model.layers.0.mlp.experts.7.down_proj.weight", "W8A8_MXFP8"},
       {"model.language_model.layers.0.linear_attn.in_proj_b.weight", "FLOAT"}});
}

// The shipped msmodelslim export (router quantized too) against quantize of the BF16 fixture
// with the same choices: the same codes, so the same logits.
TEST(Hybrid, ShippedOfflineExportEqualsQuantize) {
  const std::string out = test::temp_dir("q35gate");
  ExportOptions eo;
  eo.scheme = Scheme::kW8A8Mxfp8;
  eo.quantize_router_gate = true;
  ASSERT_TRUE(export_msmodelslim(fixture("tiny-qwen3_5-moe"), out, eo).is_ok());
  LoadOptions opt;
  opt.threads = 2;
  auto mine = load_model(out, opt);
  ASSERT_TRUE(mine.is_ok()) << mine.status().to_string();
  auto shipped = load_model(fixture("tiny-qwen3_5-moe-w8a8-mxfp8"), opt);
  ASSERT_TRUE(shipped.is_ok()) << shipped.status().to_string();
  const std::vector<int32_t> ids = {1277, 278, 258, 1105, 4017, 603, 3652, 1176, 11, 330};
  const auto a = logits_of(**mine, ids), b = logits_of(**shipped, ids);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  std::printf("quantize vs the shipped export: max |dlogit| %.3e\n", diff);
  EXPECT_EQ(diff, 0.0);
  fs::remove_all(out);
}

// A copy of the dense Qwen3.5 fixture with its weights rewritten by `edit` (which may drop a
// tensor by returning false, or replace it).
std::string damaged(const std::string& tag,
                    const std::function<bool(const std::string&, Tensor*)>& edit) {
  const std::string src = fixture("tiny-qwen3_5-dense");
  const std::string dir = test::temp_dir(tag);
  auto in = SafetensorsFile::open(src + "/model.safetensors");
  EXPECT_TRUE(in.is_ok());
  SafetensorsWriter w;
  for (const TensorInfo& t : in->tensors()) {
    Tensor x = *in->tensor(t.name);
    if (edit(t.name, &x)) {
      EXPECT_TRUE(w.add(t.name, x).is_ok());
    }
  }
  EXPECT_TRUE(w.write(dir + "/model.safetensors").is_ok());
  fs::copy_file(src + "/config.json", dir + "/config.json");
  return dir;
}

std::string load_error(const std::string& dir) {
  auto m = load_model(dir, LoadOptions{});
  fs::remove_all(dir);
  return m.is_ok() ? "loaded" : m.status().to_string();
}

TEST(Hybrid, MissingALogIsNamed) {
  const std::string e = load_error(damaged("alog", [](const std::string& n, Tensor*) {
    return n.find("linear_attn.A_log") == std::string::npos;
  }));
  EXPECT_NE(e.find("A_log"), std::string::npos) << e;
}

TEST(Hybrid, WrongConvWidthIsNamed) {
  const std::string e = load_error(damaged("conv", [](const std::string& n, Tensor* t) {
    if (n.find("conv1d.weight") != std::string::npos) *t = t->slice(2, 0, 3);
    return true;
  }));
  EXPECT_NE(e.find("conv1d.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("linear_conv_kernel_dim is 4"), std::string::npos) << e;
}

// config.json of the dense fixture with text_config edited.
std::string config_error(const std::function<void(Json&)>& edit) {
  auto text = read_text_file(fixture("tiny-qwen3_5-dense") + "/config.json");
  EXPECT_TRUE(text.is_ok());
  Json j = Json::parse(*text);
  edit(j["text_config"]);
  auto c = parse_model_config(j.dump(), "config.json");
  return c.is_ok() ? "parsed" : c.status().to_string();
}

TEST(Hybrid, BadLayerScheduleIsNamed) {
  std::string e = config_error([](Json& t) { t["layer_types"][0] = "sliding_attention"; });
  EXPECT_NE(e.find("layer_types[0] is 'sliding_attention'"), std::string::npos) << e;
  e = config_error([](Json& t) { t["layer_types"].push_back("full_attention"); });
  EXPECT_NE(e.find("one kind per layer (2), got 3"), std::string::npos) << e;
  e = config_error([](Json& t) { t["linear_num_value_heads"] = 3; });
  EXPECT_NE(e.find("linear_num_value_heads (3) is not a multiple of linear_num_key_heads (2)"),
            std::string::npos)
      << e;
  e = config_error([](Json& t) { t["num_hidden_layers"] = int64_t{1} << 40; });
  EXPECT_NE(e.find("num_hidden_layers"), std::string::npos) << e;
  e = config_error([](Json& t) {
    t["linear_key_head_dim"] = int64_t{1} << 20;
    t["linear_value_head_dim"] = int64_t{1} << 23;
  });
  EXPECT_NE(e.find("exceeds 2^40 state values"), std::string::npos) << e;
  e = config_error([](Json& t) { t["rope_parameters"]["rope_type"] = "yarn"; });
  EXPECT_NE(e.find("rope_type 'yarn' is not supported"), std::string::npos) << e;
  e = config_error([](Json& t) {
    t.erase("layer_types");
    t["full_attention_interval"] = 2;
  });
  EXPECT_EQ(e, "parsed");
}

// in_proj_qkv and in_proj_z run as one matmul: an offline checkpoint must give them one type.
TEST(Hybrid, PackedShardsOfTwoTypesAreNamed) {
  const std::string src = fixture("tiny-qwen3_5-moe-w8a8-mxfp8");
  const std::string dir = test::temp_dir("packed");
  for (const auto& e : fs::directory_iterator(src)) {
    fs::create_symlink(e.path(), fs::path(dir) / e.path().filename());
  }
  fs::remove(fs::path(dir) / "quant_model_description.json");
  auto desc = read_json_file(src + "/quant_model_description.json");
  ASSERT_TRUE(desc.is_ok());
  (*desc)["model.language_model.layers.0.linear_attn.in_proj_z.weight"] = "FLOAT";
  std::ofstream(dir + "/quant_model_description.json") << desc->dump();
  const std::string e = load_error(dir);
  EXPECT_NE(e.find("packed module 'model.language_model.layers.0.linear_attn.in_proj_qkvz' mixes "
                   "types"),
            std::string::npos)
      << e;
}

// The architecture's packed modules merge with the generic ones; its entry replaces a generic
// one only under the same key.
TEST(Hybrid, PackedModulesMergeWithTheGenericTable) {
  const PackedModules merged = merge_packed_modules(
      {{"in_proj_qkvz", {"in_proj_qkv", "in_proj_z"}}, {"gate_up_proj", {"w1", "w3"}}});
  EXPECT_EQ(merged.at("in_proj_qkvz"), (std::vector<std::string>{"in_proj_qkv", "in_proj_z"}));
  EXPECT_EQ(merged.at("qkv_proj"), (std::vector<std::string>{"q_proj", "k_proj", "v_proj"}));
  EXPECT_EQ(merged.at("gate_up_proj"), (std::vector<std::string>{"w1", "w3"}));
  EXPECT_EQ(generic_packed_modules().at("gate_up_proj"),
            (std::vector<std::string>{"gate_proj", "up_proj"}));
}

}  // namespace
}  // namespace mx
