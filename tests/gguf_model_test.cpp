// GGUF checkpoints as models, and the checks every checkpoint kind shares at load: MXFP4
// blocks moved into an MX scheme without loss, --quantization against what a checkpoint holds,
// tensors no module reads, QuaRot exports, and an unknown architecture.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "kernels/ops.h"
#include "loader/gguf.h"
#include "loader/gguf_source.h"
#include "loader/safetensors.h"
#include "model/export.h"
#include "model/model.h"
#include "test_util.h"

namespace mx {
namespace {

namespace fs = std::filesystem;

std::string gguf_dir() { return test::shared_dir() + "/fixtures/gguf"; }
std::string mxfp4_file() { return gguf_dir() + "/tiny-qwen3-moe-allmoe.MXFP4_MOE.gguf"; }

std::vector<int32_t> prompt_ids(const std::string& golden, size_t i) {
  auto g = read_json_file(golden);
  EXPECT_TRUE(g.is_ok());
  return (*g)["prompts"][i]["input_ids"].get<std::vector<int32_t>>();
}

std::vector<float> logits_of(DecoderModel& m, const std::vector<int32_t>& ids) {
  KvCache cache(m.config(), static_cast<int64_t>(ids.size()) + 4);
  std::vector<float> out(ids.size() * static_cast<size_t>(m.config().vocab_size));
  EXPECT_TRUE(
      m.forward(ids.data(), static_cast<int64_t>(ids.size()), cache, true, out.data()).is_ok());
  return out;
}

// The GGUF's tensors dequantized by the reference dequantizers into an F32 Hugging Face
// checkpoint, expert banks split per expert: the same weights in a checkpoint with no blocks.
void write_f32_checkpoint(const std::string& gguf, const std::string& config,
                          const std::string& out) {
  auto f = GgufFile::open(gguf);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  SafetensorsWriter w;
  for (const GgufTensorInfo& t : f->tensors()) {
    const int64_t ne0 = t.ne[0];
    int64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    std::vector<float> v(static_cast<size_t>(ne0 * rows));
    const int64_t rb = ggml_row_bytes(t.type, ne0);
    for (int64_t r = 0; r < rows; ++r) {
      ggml_type_info(t.type).reference(t.data + r * rb, v.data() + r * ne0, ne0);
    }
    const std::string hf = gguf_to_hf_name(t.name);
    if (t.ne.size() == 3) {
      const size_t cut = hf.rfind(".", hf.size() - 8);  // before "<proj>.weight"
      const int64_t per = ne0 * t.ne[1];
      for (int64_t e = 0; e < t.ne[2]; ++e) {
        const std::string name = hf.substr(0, cut) + "." + std::to_string(e) + hf.substr(cut);
        ASSERT_TRUE(w.add(name, DType::kF32, {t.ne[1], ne0}, v.data() + e * per,
                          static_cast<size_t>(per) * 4)
                        .is_ok());
      }
      continue;
    }
    Shape shape(t.ne.rbegin(), t.ne.rend());
    ASSERT_TRUE(w.add(hf, DType::kF32, shape, v.data(), v.size() * 4).is_ok());
  }
  fs::create_directories(out);
  ASSERT_TRUE(w.write(out + "/model.safetensors").is_ok());
  fs::copy_file(config, out + "/config.json", fs::copy_options::overwrite_existing);
}

// ggml's MXFP4 value is 2^(e-128) x doubled E2M1: the same number as OCP's 2^(e-127) x E2M1,
// so the blocks become MX panels bit for bit. The model that repacks them must equal, bit for
// bit, the same scheme applied online to an F32 checkpoint of the dequantized weights (whose
// E8M0 floor scale picks each block's own exponent back).
TEST(GgufModel, Mxfp4MovesIntoW4a8WithNoLoss) {
  const std::string dir = test::temp_dir("mxfp4");
  write_f32_checkpoint(mxfp4_file(), gguf_dir() + "/tiny-qwen3-moe-allmoe.hf-config.json", dir);
  if (HasFatalFailure()) return;
  const std::string golden = gguf_dir() + "/golden/tiny-qwen3-moe-allmoe.MXFP4_MOE.golden.json";
  LoadOptions opt;
  opt.threads = 2;
  opt.quantization = Scheme::kW4A8Mxfp4;
  // What stays in ggml blocks (lm_head, attention) then runs exact, as the F32 checkpoint's
  // float weights do.
  opt.gguf_activations = GgmlActivations::kF32;
  auto a = load_model(mxfp4_file(), opt);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  auto b = load_model(dir, opt);
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_NE((*a)->layers[0].moe->experts->scheme_name().find("w4a8"), std::string::npos);
  auto ref = SafetensorsFile::open(gguf_dir() +
                                   "/golden/tiny-qwen3-moe-allmoe.MXFP4_MOE.logits.safetensors");
  ASSERT_TRUE(ref.is_ok());
  const int64_t vocab = (*a)->config().vocab_size;
  for (size_t p = 0; p < 2; ++p) {
    const std::vector<int32_t> ids = prompt_ids(golden, p);
    const auto la = logits_of(**a, ids), lb = logits_of(**b, ids);
    ASSERT_EQ(la.size(), lb.size());
    EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0) << "prompt " << p;
    // KL(reference || w4a8) per position, for the record.
    auto r = ref->tensor("prompt" + std::to_string(p) + ".logits");
    ASSERT_TRUE(r.is_ok());
    double kl = 0;
    std::vector<float> lr(static_cast<size_t>(vocab)), lq(lr.size());
    const int64_t n = static_cast<int64_t>(ids.size());
    for (int64_t t = 0; t < n; ++t) {
      log_softmax(r->data_as<float>() + t * vocab, vocab, lr.data());
      log_softmax(la.data() + t * vocab, vocab, lq.data());
      for (int64_t v = 0; v < vocab; ++v) kl += std::exp(lr[v]) * (lr[v] - lq[v]);
    }
    std::printf("MXFP4_MOE w4a8_mxfp4 prompt %zu: mean KL against the golden %.4f\n", p,
                kl / static_cast<double>(n));
  }
  fs::remove_all(dir);
}

// k-quants and 8-bit blocks requantized into every MX scheme (--quantization on a GGUF): the
// schemes are in use and their KL against the dequantized-at-load golden is recorded.
TEST(GgufModel, KQuantsMoveIntoEveryScheme) {
  const std::string file = gguf_dir() + "/tiny-qwen3-moe-allmoe.Q4_K_M.gguf";
  const std::string golden = gguf_dir() + "/golden/tiny-qwen3-moe-allmoe.Q4_K_M.golden.json";
  auto ref =
      SafetensorsFile::open(gguf_dir() + "/golden/tiny-qwen3-moe-allmoe.Q4_K_M.logits.safetensors");
  ASSERT_TRUE(ref.is_ok());
  auto r = ref->tensor("prompt0.logits");
  ASSERT_TRUE(r.is_ok());
  const std::vector<int32_t> ids = prompt_ids(golden, 0);
  for (Scheme s :
       {Scheme::kW8A8Mxfp8, Scheme::kW4A8Mxfp4, Scheme::kW4A4Mxfp4, Scheme::kW4A4Mxfp4Dual}) {
    LoadOptions opt;
    opt.threads = 2;
    opt.quantization = s;
    auto m = load_model(file, opt);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    EXPECT_NE((*m)->scheme_summary().find(scheme_info(s).name), std::string::npos);
    const int64_t vocab = (*m)->config().vocab_size;
    const auto q = logits_of(**m, ids);
    std::vector<float> lr(static_cast<size_t>(vocab)), lq(lr.size());
    double kl = 0;
    for (size_t t = 0; t < ids.size(); ++t) {
      log_softmax(r->data_as<float>() + t * vocab, vocab, lr.data());
      log_softmax(q.data() + t * vocab, vocab, lq.data());
      for (int64_t v = 0; v < vocab; ++v) kl += std::exp(lr[v]) * (lr[v] - lq[v]);
    }
    kl /= static_cast<double>(ids.size());
    std::printf("moe Q4_K_M -> %s: mean KL against the golden %.4f\n",
                std::string(scheme_info(s).name).c_str(), kl);
    EXPECT_TRUE(std::isfinite(kl));
    if (s == Scheme::kW8A8Mxfp8) {
      EXPECT_LT(kl, 0.1);
    }
  }
}

TEST(GgufModel, Mxfp4RefusesAnotherWeightFormat) {
  LoadOptions opt;
  opt.quantization = Scheme::kW8A8Mxfp8;
  auto m = load_model(mxfp4_file(), opt);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("holds MXFP4 weights"), std::string::npos)
      << m.status().to_string();
}

// A byte-for-byte copy of a fixture with one string value replaced by one of equal length.
std::string patched_copy(const std::string& src, const std::string& from, const std::string& to,
                         const std::string& out) {
  auto text = read_text_file(src);
  EXPECT_TRUE(text.is_ok());
  std::string s = *text;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos);
  s.replace(at, from.size(), to);
  std::ofstream(out, std::ios::binary) << s;
  return out;
}

TEST(GgufModel, UnknownArchitectureIsNamed) {
  const std::string dir = test::temp_dir("arch");
  // The value follows its key: type 8 (string), length 5, "qwen3".
  const std::string key =
      std::string("general.architecture") + std::string("\x08\0\0\0\x05\0\0\0\0\0\0\0", 12);
  const std::string f = patched_copy(gguf_dir() + "/tiny-qwen3-dense.Q4_0.gguf", key + "qwen3",
                                     key + "llama", dir + "/llama.gguf");
  auto m = load_model(f, LoadOptions{});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("general.architecture 'llama'"), std::string::npos)
      << m.status().to_string();
  fs::remove_all(dir);
}

// GGUF metadata meets the bounds of config.json: an infinite rope.freq_base (a float32 GGUF
// can hold, JSON cannot) is refused by name.
TEST(GgufModel, InfiniteRopeBaseIsRefused) {
  const std::string dir = test::temp_dir("ropeinf");
  auto f32 = [](float v) {
    std::string b(4, '\0');
    std::memcpy(b.data(), &v, 4);
    return b;
  };
  // The value follows its key: type 6 (float32), then four bytes.
  const std::string key = std::string("qwen3.rope.freq_base") + std::string("\x06\0\0\0", 4);
  const std::string f =
      patched_copy(gguf_dir() + "/tiny-qwen3-dense.Q4_0.gguf", key + f32(10000.0f),
                   key + f32(std::numeric_limits<float>::infinity()), dir + "/inf.gguf");
  auto m = load_model(f, LoadOptions{});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("rope_theta must be a finite positive number"),
            std::string::npos)
      << m.status().to_string();
  fs::remove_all(dir);
}

std::string u32_bytes(uint32_t v) {
  std::string b(4, '\0');
  std::memcpy(b.data(), &v, 4);
  return b;
}

// A Qwen3.5 file whose metadata contradicts itself is refused naming the key.
TEST(GgufModel, Qwen3_5MetadataOutOfRangeIsNamed) {
  const std::string dir = test::temp_dir("q35meta");
  const std::string src = gguf_dir() + "/tiny-qwen3_5-moe.Q4_K_M.gguf";
  struct Case {
    const char* key;
    uint32_t from, to;
    const char* error;
  };
  for (const Case& c : {Case{"ssm.inner_size", 256, 250, "must split into ssm.time_step_rank"},
                        Case{"ssm.group_count", 2, 3, "a multiple of ssm.group_count"},
                        Case{"nextn_predict_layers", 1, 5, "leaves no decoder layer"},
                        Case{"ssm.conv_kernel", 4, 0, "ssm.conv_kernel must be between"}}) {
    // The value follows its key: type 4 (uint32), then four bytes.
    const std::string key = std::string("qwen35moe.") + c.key + std::string("\x04\0\0\0", 4);
    const std::string f =
        patched_copy(src, key + u32_bytes(c.from), key + u32_bytes(c.to), dir + "/bad.gguf");
    auto m = load_model(f, LoadOptions{});
    ASSERT_FALSE(m.is_ok()) << c.key;
    EXPECT_NE(m.status().message().find(c.error), std::string::npos) << m.status().to_string();
  }
  fs::remove_all(dir);
}

// ssm_a stores -exp(A_log): a value that is not negative has no logarithm to give back.
TEST(GgufModel, Qwen3_5PositiveSsmAIsRefused) {
  const std::string dir = test::temp_dir("q35ssma");
  const std::string src = gguf_dir() + "/tiny-qwen3_5-dense.Q4_K_M.gguf";
  auto text = read_text_file(src);
  ASSERT_TRUE(text.is_ok());
  std::string bytes = *text;
  {
    auto f = GgufFile::open(src);
    ASSERT_TRUE(f.is_ok());
    const GgufTensorInfo* t = f->tensor("blk.0.ssm_a");
    ASSERT_NE(t, nullptr);
    const size_t at = static_cast<size_t>(t->data - f->files()[0]->data());
    const float positive = 0.5f;
    std::memcpy(bytes.data() + at + 4, &positive, 4);
  }
  std::ofstream(dir + "/bad.gguf", std::ios::binary) << bytes;
  auto m = load_model(dir + "/bad.gguf", LoadOptions{});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("'blk.0.ssm_a' holds 0.5"), std::string::npos)
      << m.status().to_string();
  fs::remove_all(dir);
}

// The dense fixture rewritten with extra tensors.
std::string with_extra_tensor(const std::string& name, const std::string& tag) {
  const std::string src = test::shared_dir() + "/fixtures/tiny-qwen3-dense";
  const std::string dir = test::temp_dir(tag);
  auto in = SafetensorsFile::open(src + "/model.safetensors");
  EXPECT_TRUE(in.is_ok());
  SafetensorsWriter w;
  for (const TensorInfo& t : in->tensors()) {
    auto x = in->tensor(t.name);
    EXPECT_TRUE(w.add(t.name, *x).is_ok());
  }
  const std::vector<uint16_t> bias(256, 0);
  EXPECT_TRUE(w.add(name, DType::kBF16, {256}, bias.data(), 512).is_ok());
  EXPECT_TRUE(w.write(dir + "/model.safetensors").is_ok());
  fs::copy_file(src + "/config.json", dir + "/config.json");
  return dir;
}

TEST(CheckpointUse, ATensorNoModuleReadsFailsTheLoad) {
  const std::string dir = with_extra_tensor("model.norm.bias", "bias");
  auto m = load_model(dir, LoadOptions{});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("'model.norm.bias' is not used"), std::string::npos)
      << m.status().to_string();
  fs::remove_all(dir);
}

TEST(CheckpointUse, DocumentedSkipsLoad) {
  const std::string dir = with_extra_tensor("mtp.layers.0.norm.weight", "mtp");
  auto m = load_model(dir, LoadOptions{});
  EXPECT_TRUE(m.is_ok()) << m.status().to_string();
  fs::remove_all(dir);
}

std::string offline_dir(const std::string& tag) {
  const std::string dir = test::temp_dir(tag);
  ExportOptions opt;
  opt.scheme = Scheme::kW8A8Mxfp8;
  EXPECT_TRUE(
      export_msmodelslim(test::shared_dir() + "/fixtures/tiny-qwen3-dense", dir, opt).is_ok());
  return dir;
}

TEST(CheckpointUse, QuaRotExportsAreRefusedByName) {
  const std::string dir = offline_dir("quarot");
  auto desc = read_json_file(dir + "/quant_model_description.json");
  ASSERT_TRUE(desc.is_ok());
  (*desc)["is_rot_used"] = true;
  std::ofstream(dir + "/quant_model_description.json") << desc->dump();
  auto m = load_model(dir, LoadOptions{});
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("QuaRot rotation is not supported"), std::string::npos)
      << m.status().to_string();
  fs::remove_all(dir);
}

// mxserve's own block rotation is written beside is_rot_used: true; a description that
// holds one without the other, or a block not offered, is refused by name.
TEST(CheckpointUse, BlockRotationFieldsMustAgree) {
  const std::string dir = offline_dir("rotfields");
  const std::string file = dir + "/quant_model_description.json";
  auto desc = read_json_file(file);
  ASSERT_TRUE(desc.is_ok());
  struct Case {
    Json rot_used, rotation;
    const char* message;
  };
  const Json block32 = {{"type", "hadamard"}, {"block", 32}};
  for (const Case& c :
       {Case{Json(), block32, "mx_block_rotation without is_rot_used: true"},
        Case{true, Json{{"type", "hadamard"}, {"block", 64}}, "must be {\"type\": \"hadamard\""},
        Case{true, Json{{"type", "quarot"}, {"block", 32}}, "must be {\"type\": \"hadamard\""}}) {
    Json d = *desc;
    if (!c.rot_used.is_null()) d["is_rot_used"] = c.rot_used;
    d["mx_block_rotation"] = c.rotation;
    std::ofstream(file) << d.dump();
    auto m = load_model(dir, LoadOptions{});
    ASSERT_FALSE(m.is_ok());
    EXPECT_NE(m.status().message().find(c.message), std::string::npos) << m.status().to_string();
  }
  fs::remove_all(dir);
}

TEST(CheckpointUse, QuantizationFlagAgainstAnOfflineCheckpoint) {
  const std::string dir = offline_dir("flag");
  LoadOptions ms;
  ms.expect_modelslim = true;
  EXPECT_TRUE(load_model(dir, ms).is_ok());
  LoadOptions other;
  other.quantization = Scheme::kW4A4Mxfp4Dual;
  auto m = load_model(dir, other);
  ASSERT_FALSE(m.is_ok());
  EXPECT_NE(m.status().message().find("W8A8_MXFP8) but --quantization asks for w4a4_mxfp4_dual"),
            std::string::npos)
      << m.status().to_string();
  auto hf = load_model(test::shared_dir() + "/fixtures/tiny-qwen3-dense", ms);
  ASSERT_FALSE(hf.is_ok());
  EXPECT_NE(hf.status().message().find("needs an msmodelslim checkpoint"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mx
