// Whole-model quantization: offline checkpoints written by `quantize` load to the same logits
// as online quantization; damaged offline checkpoints fail naming the tensor and the reason;
// the fused MoE dispatch equals the FP32-rows path and makes no separate quantization pass.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "loader/quant_description.h"
#include "loader/safetensors.h"
#include "model/export.h"
#include "model/model.h"
#include "test_util.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

const Scheme kMxSchemes[] = {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4,
                             Scheme::kW4A4Mxfp4Dual};
// Golden prompt 0 of the fixture: "It is a truth universally acknowledged, that".
const std::vector<int32_t> kPrompt = {1277, 278, 258, 1105, 4017, 603, 3652, 1176, 11, 330};

std::string model_dir() { return test::source_dir() + "/models/tiny-qwen3-moe"; }

std::vector<float> logits_of(DecoderModel& m) {
  KvCache cache(m.config(), 16);
  std::vector<float> out(static_cast<size_t>(kPrompt.size() * m.config().vocab_size));
  EXPECT_TRUE(
      m.forward(kPrompt.data(), static_cast<int64_t>(kPrompt.size()), cache, true, out.data())
          .is_ok());
  return out;
}

TEST(QuantModel, OfflineEqualsOnline) {
  const std::string root = test::temp_dir("offline");
  for (Scheme s : kMxSchemes) {
    const std::string dir = root + "/" + std::string(scheme_info(s).name);
    ExportOptions opt;
    opt.scheme = s;
    opt.max_shard_bytes = 4 << 20;  // several shards and an index
    auto sum = export_msmodelslim(model_dir(), dir, opt);
    ASSERT_TRUE(sum.is_ok()) << sum.status().to_string();
    EXPECT_GT(sum->shards, 1);
    LoadOptions off_opt;
    off_opt.threads = 2;
    auto off = load_model(dir, off_opt);
    ASSERT_TRUE(off.is_ok()) << off.status().to_string();
    EXPECT_TRUE((*off)->offline_quantized);
    LoadOptions on_opt = off_opt;
    on_opt.quantization = s;
    auto on = load_model(model_dir(), on_opt);
    ASSERT_TRUE(on.is_ok()) << on.status().to_string();
    const auto a = logits_of(**off), b = logits_of(**on);
    double max_diff = 0;
    for (size_t i = 0; i < a.size(); ++i)
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(a[i] - b[i])));
    // The same codes and scales: equal up to FP32 rounding (the dequantized router gate).
    EXPECT_LE(max_diff, 1e-4) << scheme_info(s).name;
    std::printf("%s: offline vs online max |dlogit| %.2e, %lld shards\n",
                std::string(scheme_info(s).name).c_str(), max_diff,
                static_cast<long long>(sum->shards));
  }
  fs::remove_all(root);
}

// A rotated export (block32 and block128, every scheme) loads with no flag and gives the
// logits of online quantization under the same rotation; the description marks it so that a
// reader that does not know the rotation refuses it.
TEST(QuantModel, RotatedOfflineEqualsRotatedOnline) {
  const std::string root = test::temp_dir("rotated");
  for (int64_t rot : {32, 128}) {
    for (Scheme s : kMxSchemes) {
      const std::string dir = root + "/" + std::string(scheme_info(s).name) + std::to_string(rot);
      ExportOptions opt;
      opt.scheme = s;
      opt.rotation = rot;
      auto sum = export_msmodelslim(model_dir(), dir, opt);
      ASSERT_TRUE(sum.is_ok()) << sum.status().to_string();
      auto desc = load_quant_description(dir);
      ASSERT_TRUE(desc.is_ok()) << desc.status().to_string();
      EXPECT_EQ(desc->rotation, rot);
      auto text = read_text_file(dir + "/quant_model_description.json");
      ASSERT_TRUE(text.is_ok());
      EXPECT_NE(text->find("\"is_rot_used\": true"), std::string::npos);
      LoadOptions off_opt;
      off_opt.threads = 2;
      auto off = load_model(dir, off_opt);
      ASSERT_TRUE(off.is_ok()) << off.status().to_string();
      LoadOptions on_opt = off_opt;
      on_opt.quantization = s;
      on_opt.rotation = rot;
      auto on = load_model(model_dir(), on_opt);
      ASSERT_TRUE(on.is_ok()) << on.status().to_string();
      LoadOptions plain_opt = on_opt;
      plain_opt.rotation = 0;
      auto plain = load_model(model_dir(), plain_opt);
      ASSERT_TRUE(plain.is_ok());
      const auto a = logits_of(**off), b = logits_of(**on), c = logits_of(**plain);
      EXPECT_EQ(a, b) << scheme_info(s).name << " block " << rot;
      EXPECT_NE(b, c);  // the rotation reaches the logits
    }
  }
  fs::remove_all(root);
}

// --quantize-lm-head: online and offline (quantize --quantize-lm-head) give the same logits,
// lm_head is stored in the scheme (not BF16), and the logits move away from the BF16-head
// model by a quantization-sized amount.
TEST(QuantModel, QuantizedLmHeadOnlineEqualsOffline) {
  const std::string root = test::temp_dir("head");
  for (Scheme s : {Scheme::kW8A8Mxfp8, Scheme::kW4A4Mxfp4Dual}) {
    const std::string dir = root + "/" + std::string(scheme_info(s).name);
    ExportOptions opt;
    opt.scheme = s;
    opt.quantize_lm_head = true;
    ASSERT_TRUE(export_msmodelslim(model_dir(), dir, opt).is_ok());
    auto desc = read_text_file(dir + "/quant_model_description.json");
    ASSERT_TRUE(desc.is_ok());
    EXPECT_NE(desc->find("\"lm_head.weight\": \"" + std::string(scheme_info(s).offline_type)),
              std::string::npos);
    LoadOptions lo;
    lo.threads = 2;
    auto off = load_model(dir, lo);
    ASSERT_TRUE(off.is_ok()) << off.status().to_string();
    lo.quantization = s;
    auto plain = load_model(model_dir(), lo);
    lo.quantize_lm_head = true;
    auto on = load_model(model_dir(), lo);
    ASSERT_TRUE(on.is_ok() && plain.is_ok());
    EXPECT_EQ((*on)->lm_head->scheme_name(), scheme_info(s).name);
    EXPECT_EQ((*plain)->lm_head->scheme_name(), "bf16");
    const int64_t vocab = (*on)->config().vocab_size, hid = (*on)->config().hidden_size;
    EXPECT_LT((*on)->lm_head->weight_bytes(), static_cast<uint64_t>(vocab * hid * 2));
    const auto a = logits_of(**off), b = logits_of(**on), c = logits_of(**plain);
    double same = 0, moved = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      same = std::max(same, static_cast<double>(std::fabs(a[i] - b[i])));
      moved = std::max(moved, static_cast<double>(std::fabs(b[i] - c[i])));
    }
    EXPECT_LE(same, 1e-4) << scheme_info(s).name;
    EXPECT_GT(moved, 1e-3) << scheme_info(s).name;
    EXPECT_LT(moved, 5.0) << scheme_info(s).name;
  }
  fs::remove_all(root);
}

// Per-module schemes (experts in W4A8, attention and lm_head in W8A8_MXFP8): each tensor of
// the mix is, type and bytes, what the single-scheme export of its scheme writes for it, and
// the mix loads with each module in its own scheme.
TEST(QuantModel, ModuleSchemesMixWhatTheSingleSchemesWrite) {
  const std::string root = test::temp_dir("mix");
  ExportOptions mix;
  mix.scheme = Scheme::kW4A8Mxfp4;
  mix.module_schemes = {{"self_attn", Scheme::kW8A8Mxfp8},
                        {"lm_head", Scheme::kW8A8Mxfp8},
                        {"no_such_module", Scheme::kW4A4Mxfp4}};
  auto sum = export_msmodelslim(model_dir(), root + "/mix", mix);
  ASSERT_TRUE(sum.is_ok()) << sum.status().to_string();
  EXPECT_EQ(sum->unmatched_module_schemes, std::vector<std::string>{"no_such_module"});
  ExportOptions w8;
  w8.scheme = Scheme::kW8A8Mxfp8;
  w8.quantize_lm_head = true;
  ExportOptions w4;
  w4.scheme = Scheme::kW4A8Mxfp4;
  ASSERT_TRUE(export_msmodelslim(model_dir(), root + "/w8", w8).is_ok());
  ASSERT_TRUE(export_msmodelslim(model_dir(), root + "/w4", w4).is_ok());
  auto desc = [&](const std::string& d) {
    auto text = read_text_file(root + "/" + d + "/quant_model_description.json");
    EXPECT_TRUE(text.is_ok());
    return nlohmann::json::parse(*text);
  };
  const nlohmann::json dm = desc("mix"), d8 = desc("w8"), d4 = desc("w4");
  auto file = [&](const std::string& d) {
    auto f = SafetensorsFile::open(root + "/" + d + "/quant_model_weights.safetensors");
    EXPECT_TRUE(f.is_ok());
    return std::move(f).value();
  };
  const SafetensorsFile fm = file("mix"), f8 = file("w8"), f4 = file("w4");
  int from8 = 0, from4 = 0;
  for (const TensorInfo& t : fm.tensors()) {
    const bool eight =
        t.name.find("self_attn") != std::string::npos || t.name.rfind("lm_head", 0) == 0;
    const nlohmann::json& dref = eight ? d8 : d4;
    const SafetensorsFile& fref = eight ? f8 : f4;
    EXPECT_EQ(dm[t.name], dref[t.name]) << t.name;
    const Tensor a = *fm.tensor(t.name);
    auto b = fref.tensor(t.name);
    ASSERT_TRUE(b.is_ok()) << t.name;
    ASSERT_EQ(a.nbytes(), b->nbytes()) << t.name;
    EXPECT_EQ(std::memcmp(a.data(), b->data(), a.nbytes()), 0) << t.name;
    (eight ? from8 : from4) += dm[t.name] != "FLOAT";
  }
  EXPECT_GT(from8, 0);
  EXPECT_GT(from4, 0);
  EXPECT_EQ(dm["lm_head.weight"], "W8A8_MXFP8");
  EXPECT_EQ(dm["model.layers.0.self_attn.q_proj.weight"], "W8A8_MXFP8");
  EXPECT_EQ(dm["model.layers.1.mlp.experts.0.down_proj.weight"], "W4A8_MXFP");
  LoadOptions lo;
  lo.threads = 2;
  auto m = load_model(root + "/mix", lo);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ((*m)->layers[0].attn.qkv->scheme_name(), "w8a8_mxfp8");
  EXPECT_EQ((*m)->layers[1].moe->experts->scheme_name(), "w4a8_mxfp4");
  EXPECT_EQ((*m)->lm_head->scheme_name(), "w8a8_mxfp8");
  for (float v : logits_of(**m)) ASSERT_TRUE(std::isfinite(v));
  fs::remove_all(root);
}

// A quantized router gate runs in its scheme with its scales: routing then matches the BF16
// gate almost everywhere. Read as BF16 without its scales, the codes would route at random.
TEST(QuantModel, QuantizedRouterGateIsDequantized) {
  const std::string root = test::temp_dir("gate");
  ExportOptions opt;
  opt.scheme = Scheme::kW8A8Mxfp8;
  opt.quantize_router_gate = true;
  ASSERT_TRUE(export_msmodelslim(model_dir(), root, opt).is_ok());
  auto text = read_text_file(root + "/quant_model_description.json");
  ASSERT_NE(text->find("\"model.layers.1.mlp.gate.weight\": \"W8A8_MXFP8\""), std::string::npos);
  LoadOptions lo;
  auto off = load_model(root, lo);
  ASSERT_TRUE(off.is_ok()) << off.status().to_string();
  lo.quantization = Scheme::kW8A8Mxfp8;
  auto on = load_model(model_dir(), lo);
  ASSERT_TRUE(on.is_ok());
  (*off)->set_trace_router(true);
  (*on)->set_trace_router(true);
  logits_of(**off);
  logits_of(**on);
  int same = 0, total = 0;
  for (size_t l = 0; l < (*on)->router_trace().size(); ++l) {
    const auto& a = (*off)->router_trace()[l].experts;
    const auto& b = (*on)->router_trace()[l].experts;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i] ? 1 : 0;
    total += static_cast<int>(a.size());
  }
  EXPECT_GE(same, total * 9 / 10) << same << "/" << total << " router choices agree";
  fs::remove_all(root);
}

// Rewrites one tensor of an offline checkpoint (or drops it when `replace` is null).
void rewrite(const std::string& dir, const std::string& name, const Tensor* replace) {
  const std::string path = dir + "/quant_model_weights.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok());
  SafetensorsWriter w;
  for (const TensorInfo& t : f->tensors()) {
    if (t.name == name) {
      if (replace) {
        ASSERT_TRUE(w.add(name, *replace).is_ok());
      }
      continue;
    }
    ASSERT_TRUE(w.add(t.name, *f->tensor(t.name)).is_ok());
  }
  const std::string bytes = w.serialize();
  std::ofstream(path + ".new", std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  fs::rename(path + ".new", path);
}

void expect_load_error(const std::string& dir, const std::string& tensor,
                       const std::string& reason) {
  auto m = load_model(dir, LoadOptions{});
  ASSERT_FALSE(m.is_ok()) << "loaded a damaged checkpoint (" << reason << ")";
  EXPECT_NE(m.status().message().find(tensor), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find(reason), std::string::npos) << m.status().message();
}

// The export never writes into its source, nor over files it was not told to replace, and its
// shard limit is bounded; each refusal happens before anything is written.
TEST(QuantModel, ExportRefusesOutputsThatWouldDamageFiles) {
  const std::string root = test::temp_dir("refuse");
  ExportOptions opt;
  auto expect = [&](const std::string& out, const std::string& needle) {
    auto r = export_msmodelslim(model_dir(), out, opt);
    ASSERT_FALSE(r.is_ok()) << out;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  expect(model_dir(), "or inside it");
  expect(model_dir() + "/", "or inside it");
  expect(model_dir() + "/sub/../q", "or inside it");
  EXPECT_FALSE(fs::exists(model_dir() + "/q"));
  std::ofstream(root + "/notes.txt") << "keep";
  expect(root, "is not empty; pass --force");
  opt.max_shard_bytes = 1000;
  expect(root + "/small", "between 1 MiB and 1 TiB");
  EXPECT_FALSE(fs::exists(root + "/small"));
  fs::remove_all(root);
}

TEST(QuantModel, DamagedOfflineCheckpointsAreNamed) {
  const std::string root = test::temp_dir("damaged");
  ExportOptions opt;
  opt.scheme = Scheme::kW8A8Mxfp8;
  const std::string clean = root + "/clean";
  ASSERT_TRUE(export_msmodelslim(model_dir(), clean, opt).is_ok());
  const std::string q = "model.layers.1.self_attn.q_proj";
  auto fresh = [&](const std::string& tag) {
    const std::string d = root + "/" + tag;
    fs::copy(clean, d, fs::copy_options::recursive);
    return d;
  };
  {  // a missing weight_scale
    const std::string d = fresh("noscale");
    rewrite(d, q + ".weight_scale", nullptr);
    expect_load_error(d, q + ".weight_scale", "missing");
  }
  {  // a scale of the wrong shape
    const std::string d = fresh("shape");
    Tensor t = Tensor::empty(DType::kU8, {256, 3});
    rewrite(d, q + ".weight_scale", &t);
    expect_load_error(d, q + ".weight_scale", "must be U8[256, 8]");
  }
  {  // a NaN scale byte
    const std::string d = fresh("nan");
    auto f = SafetensorsFile::open(d + "/quant_model_weights.safetensors");
    Tensor t = f->tensor(q + ".weight_scale")->contiguous_copy();
    t.mutable_data_as<uint8_t>()[5] = 0xFF;
    rewrite(d, q + ".weight_scale", &t);
    expect_load_error(d, q + ".weight_scale", "0xFF");
  }
  {  // an unknown type string
    const std::string d = fresh("type");
    auto text = read_text_file(d + "/quant_model_description.json");
    auto j = nlohmann::ordered_json::parse(*text);
    j[q + ".weight"] = "W2A2_MAGIC";
    std::ofstream(d + "/quant_model_description.json") << j.dump();
    expect_load_error(d, q + ".weight", "W2A2_MAGIC");
  }
  {  // packed shards with different types
    const std::string d = fresh("mixed");
    auto text = read_text_file(d + "/quant_model_description.json");
    auto j = nlohmann::ordered_json::parse(*text);
    j["model.layers.1.self_attn.k_proj.weight"] = "FLOAT";
    std::ofstream(d + "/quant_model_description.json") << j.dump();
    expect_load_error(d, "model.layers.1.self_attn.k_proj", "mixes types");
  }
  fs::remove_all(root);
}

TEST(QuantModel, FusedDispatchEqualsGmm1QuantizedRows) {
  for (Scheme s : kMxSchemes) {
    LoadOptions opt;
    opt.threads = 2;
    opt.quantization = s;
    auto m = load_model(model_dir(), opt);
    ASSERT_TRUE(m.is_ok());
    auto passes = [&] {
      uint64_t n = 0;
      for (const DecoderLayer& l : (*m)->layers) {
        if (l.moe) n += l.moe->experts->gmm1_quantize_passes();
      }
      return n;
    };
    (*m)->set_fused_dispatch(true);
    const auto fused = logits_of(**m);
    EXPECT_EQ(passes(), 0u) << "the fused path quantized rows in gmm1";
    (*m)->set_fused_dispatch(false);
    const auto unfused = logits_of(**m);
    EXPECT_GT(passes(), 0u) << "FP32 rows did not reach gmm1";
    ASSERT_EQ(fused.size(), unfused.size());
    EXPECT_EQ(0, std::memcmp(fused.data(), unfused.data(), fused.size() * sizeof(float)))
        << scheme_info(s).name << ": fused and gmm1-quantized paths differ";
  }
}

}  // namespace
}  // namespace mx
