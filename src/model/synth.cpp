#include "model/synth.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "core/mapped_file.h"
#include "formats/half.h"
#include "loader/safetensors.h"

namespace mx {
namespace {

namespace fs = std::filesystem;
using OJson = nlohmann::ordered_json;

// Published shapes (the models' config.json files on the Hugging Face hub).
OJson config_like(const std::string& like, int64_t layers) {
  if (like == "qwen3-30b-a3b") {
    return {{"architectures", {"Qwen3MoeForCausalLM"}},
            {"model_type", "qwen3_moe"},
            {"vocab_size", 151936},
            {"hidden_size", 2048},
            {"num_hidden_layers", layers},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 4},
            {"head_dim", 128},
            {"intermediate_size", 6144},
            {"moe_intermediate_size", 768},
            {"num_experts", 128},
            {"num_experts_per_tok", 8},
            {"norm_topk_prob", true},
            {"decoder_sparse_step", 1},
            {"mlp_only_layers", OJson::array()},
            {"hidden_act", "silu"},
            {"rope_theta", 1000000.0},
            {"max_position_embeddings", 40960},
            {"rms_norm_eps", 1e-6},
            {"attention_bias", false},
            {"tie_word_embeddings", false},
            {"torch_dtype", "bfloat16"}};
  }
  if (like == "qwen3-8b") {
    return {{"architectures", {"Qwen3ForCausalLM"}},
            {"model_type", "qwen3"},
            {"vocab_size", 151936},
            {"hidden_size", 4096},
            {"num_hidden_layers", layers},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 8},
            {"head_dim", 128},
            {"intermediate_size", 12288},
            {"hidden_act", "silu"},
            {"rope_theta", 1000000.0},
            {"max_position_embeddings", 40960},
            {"rms_norm_eps", 1e-6},
            {"attention_bias", false},
            {"tie_word_embeddings", false},
            {"torch_dtype", "bfloat16"}};
  }
  if (like == "qwen3.5-35b-a3b") {
    // Qwen3.5-35B-A3B's text model (Qwen3_5MoeTextConfig defaults): three DeltaNet layers to
    // each gated full-attention one, 256 experts with a shared expert.
    OJson t = {{"model_type", "qwen3_5_moe_text"},
               {"vocab_size", 248320},
               {"hidden_size", 2048},
               {"num_hidden_layers", layers},
               {"num_attention_heads", 16},
               {"num_key_value_heads", 2},
               {"head_dim", 256},
               {"attn_output_gate", true},
               {"full_attention_interval", 4},
               {"linear_conv_kernel_dim", 4},
               {"linear_key_head_dim", 128},
               {"linear_value_head_dim", 128},
               {"linear_num_key_heads", 16},
               {"linear_num_value_heads", 32},
               {"moe_intermediate_size", 512},
               {"shared_expert_intermediate_size", 512},
               {"num_experts", 256},
               {"num_experts_per_tok", 8},
               {"partial_rotary_factor", 0.25},
               {"rope_parameters", {{"rope_theta", 10000000.0}, {"partial_rotary_factor", 0.25}}},
               {"max_position_embeddings", 262144},
               {"rms_norm_eps", 1e-6},
               {"tie_word_embeddings", false}};
    // As published configs spell it out (converters read it rather than the interval).
    OJson kinds = OJson::array();
    for (int64_t l = 0; l < layers; ++l) {
      kinds.push_back((l + 1) % 4 == 0 ? "full_attention" : "linear_attention");
    }
    t["layer_types"] = kinds;
    return {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
            {"model_type", "qwen3_5_moe"},
            {"text_config", t},
            {"tie_word_embeddings", false}};
  }
  return {};
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform weights with standard deviation `stdev` (the models' initializer range), or a
// constant, as BF16.
Status add_tensor(SafetensorsWriter& w, const std::string& name, const Shape& shape, uint64_t seed,
                  float stdev, float constant = 0.0f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<uint16_t> v(static_cast<size_t>(n));
  if (stdev == 0.0f) {
    std::fill(v.begin(), v.end(), float_to_bf16(constant));
  } else {
    uint64_t s = seed;
    for (char c : name) s = s * 1099511628211ull + static_cast<unsigned char>(c);
    const float half_width = stdev * 1.7320508f;  // uniform on [-a, a] has std a / sqrt(3)
    for (auto& x : v) {
      const float u = static_cast<float>(splitmix(s) >> 40) * 0x1p-24f;
      x = float_to_bf16((2.0f * u - 1.0f) * half_width);
    }
  }
  return w.add(name, DType::kBF16, shape, v.data(), v.size() * sizeof(uint16_t));
}

// The source tokenizer with filler tokens (three printable ASCII bytes each, which byte-level
// BPE maps to themselves) appended to its vocabulary up to `vocab` ids.
Status write_tokenizer(const std::string& src, const std::string& out, int64_t vocab) {
  MX_ASSIGN_OR_RETURN(std::string text, read_text_file(src + "/tokenizer.json"));
  // A sorted map: the vocabulary has 150k keys and ordered_json looks keys up linearly.
  nlohmann::json t = nlohmann::json::parse(text, nullptr, false);
  if (!t.is_object() || !t.contains("model") || !t["model"].contains("vocab") ||
      !t["model"]["vocab"].is_object()) {
    return invalid_argument(src + "/tokenizer.json: no model.vocab to extend");
  }
  nlohmann::json& v = t["model"]["vocab"];
  std::set<int64_t> used;
  std::set<std::string> names;
  for (auto it = v.begin(); it != v.end(); ++it) {
    used.insert(it.value().get<int64_t>());
    names.insert(it.key());
  }
  if (t.contains("added_tokens")) {
    for (const nlohmann::json& a : t["added_tokens"]) used.insert(a.value("id", int64_t{-1}));
  }
  int64_t code = 0;
  for (int64_t id = 0; id < vocab; ++id) {
    if (used.count(id)) continue;
    std::string s;
    do {
      s.clear();
      for (int64_t c = code++, j = 0; j < 3; ++j, c /= 94) s += static_cast<char>(33 + c % 94);
    } while (names.count(s));
    v[s] = id;
  }
  std::ofstream(out + "/tokenizer.json") << t.dump();
  std::error_code ec;
  fs::copy_file(src + "/tokenizer_config.json", out + "/tokenizer_config.json",
                fs::copy_options::overwrite_existing, ec);
  if (ec) return io_error(src + "/tokenizer_config.json: " + ec.message());
  return Status::ok();
}

// One Qwen3 / Qwen3-MoE layer after its two norms: attention, then the dense MLP or the
// per-expert MoE.
template <typename Add>
Status add_qwen3_layer(const OJson& c, const std::string& p, float sd, Add& add,
                       SafetensorsWriter& w, int64_t s) {
  const int64_t hid = c["hidden_size"], nq = c["num_attention_heads"],
                nkv = c["num_key_value_heads"], hd = c["head_dim"];
  const bool moe = c.contains("num_experts");
  MX_RETURN_IF_ERROR(add(w, s, p + "self_attn.q_proj.weight", {nq * hd, hid}, sd));
  MX_RETURN_IF_ERROR(add(w, s, p + "self_attn.k_proj.weight", {nkv * hd, hid}, sd));
  MX_RETURN_IF_ERROR(add(w, s, p + "self_attn.v_proj.weight", {nkv * hd, hid}, sd));
  MX_RETURN_IF_ERROR(add(w, s, p + "self_attn.o_proj.weight", {hid, nq * hd}, sd));
  MX_RETURN_IF_ERROR(add(w, s, p + "self_attn.q_norm.weight", {hd}, 0.0f, 1.0f));
  MX_RETURN_IF_ERROR(add(w, s, p + "self_attn.k_norm.weight", {hd}, 0.0f, 1.0f));
  if (moe) {
    const int64_t ne = c["num_experts"], inter = c["moe_intermediate_size"];
    MX_RETURN_IF_ERROR(add(w, s, p + "mlp.gate.weight", {ne, hid}, sd));
    for (int64_t e = 0; e < ne; ++e) {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      MX_RETURN_IF_ERROR(add(w, s, q + "gate_proj.weight", {inter, hid}, sd));
      MX_RETURN_IF_ERROR(add(w, s, q + "up_proj.weight", {inter, hid}, sd));
      MX_RETURN_IF_ERROR(add(w, s, q + "down_proj.weight", {hid, inter}, sd));
    }
  } else {
    const int64_t inter = c["intermediate_size"];
    MX_RETURN_IF_ERROR(add(w, s, p + "mlp.gate_proj.weight", {inter, hid}, sd));
    MX_RETURN_IF_ERROR(add(w, s, p + "mlp.up_proj.weight", {inter, hid}, sd));
    MX_RETURN_IF_ERROR(add(w, s, p + "mlp.down_proj.weight", {hid, inter}, sd));
  }
  return Status::ok();
}

// One Qwen3.5 layer after its two norms: DeltaNet or gated attention, then the MoE with its
// shared expert; routed experts fused as the published checkpoints store them.
template <typename Add>
Status add_qwen3_5_layer(const OJson& t, int64_t l, const std::string& p, float sd, Add& add,
                         SafetensorsWriter& w, int64_t s) {
  const int64_t hid = t["hidden_size"], nq = t["num_attention_heads"],
                nkv = t["num_key_value_heads"], hd = t["head_dim"];
  const int64_t nk = t["linear_num_key_heads"], nv = t["linear_num_value_heads"],
                dk = t["linear_key_head_dim"], dv = t["linear_value_head_dim"],
                kernel = t["linear_conv_kernel_dim"], every = t["full_attention_interval"];
  if ((l + 1) % every != 0) {
    const std::string a = p + "linear_attn.";
    const int64_t conv = 2 * nk * dk + nv * dv;
    MX_RETURN_IF_ERROR(add(w, s, a + "in_proj_qkv.weight", {conv, hid}, sd, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "in_proj_z.weight", {nv * dv, hid}, sd, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "in_proj_b.weight", {nv, hid}, sd, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "in_proj_a.weight", {nv, hid}, sd, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "conv1d.weight", {conv, 1, kernel}, 0.3f, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "dt_bias", {nv}, 0.0f, 1.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "A_log", {nv}, 0.0f, 0.5f));
    MX_RETURN_IF_ERROR(add(w, s, a + "norm.weight", {dv}, 0.0f, 1.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "out_proj.weight", {hid, nv * dv}, sd, 0.0f));
  } else {
    const std::string a = p + "self_attn.";
    MX_RETURN_IF_ERROR(add(w, s, a + "q_proj.weight", {2 * nq * hd, hid}, sd, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "k_proj.weight", {nkv * hd, hid}, sd, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "v_proj.weight", {nkv * hd, hid}, sd, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "o_proj.weight", {hid, nq * hd}, sd, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "q_norm.weight", {hd}, 0.0f, 0.0f));
    MX_RETURN_IF_ERROR(add(w, s, a + "k_norm.weight", {hd}, 0.0f, 0.0f));
  }
  const int64_t ne = t["num_experts"], inter = t["moe_intermediate_size"],
                shared = t["shared_expert_intermediate_size"];
  const std::string m = p + "mlp.";
  MX_RETURN_IF_ERROR(add(w, s, m + "gate.weight", {ne, hid}, sd, 0.0f));
  MX_RETURN_IF_ERROR(add(w, s, m + "experts.gate_up_proj", {ne, 2 * inter, hid}, sd, 0.0f));
  MX_RETURN_IF_ERROR(add(w, s, m + "experts.down_proj", {ne, hid, inter}, sd, 0.0f));
  MX_RETURN_IF_ERROR(add(w, s, m + "shared_expert.gate_proj.weight", {shared, hid}, sd, 0.0f));
  MX_RETURN_IF_ERROR(add(w, s, m + "shared_expert.up_proj.weight", {shared, hid}, sd, 0.0f));
  MX_RETURN_IF_ERROR(add(w, s, m + "shared_expert.down_proj.weight", {hid, shared}, sd, 0.0f));
  return add(w, s, m + "shared_expert_gate.weight", {1, hid}, sd, 0.0f);
}

}  // namespace

std::vector<std::string> synth_model_names() {
  return {"qwen3-30b-a3b", "qwen3-8b", "qwen3.5-35b-a3b"};
}

Result<SynthSummary> write_synthetic_model(const SynthOptions& opt, const std::string& out_dir) {
  OJson c = config_like(opt.like, opt.layers);
  if (c.empty()) {
    return invalid_argument("unknown model '" + opt.like +
                            "' (known: qwen3-30b-a3b, qwen3-8b, qwen3.5-35b-a3b)");
  }
  if (opt.layers < 1) return invalid_argument("--layers must be at least 1");
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error(out_dir + ": " + ec.message());
  const bool hybrid = c.contains("text_config");
  const OJson& t = hybrid ? c["text_config"] : c;
  const int64_t vocab = t["vocab_size"], hid = t["hidden_size"];
  // Qwen3.5: the language model under model.language_model., zero-centred norms (stored 0).
  const std::string pre = hybrid ? "model.language_model." : "model.";
  const float norm_one = hybrid ? 0.0f : 1.0f;
  MX_RETURN_IF_ERROR(write_tokenizer(opt.tokenizer_dir, out_dir, vocab));
  // Special token ids as the tokenizer has them.
  MX_ASSIGN_OR_RETURN(std::string gen_text,
                      read_text_file(opt.tokenizer_dir + "/generation_config.json"));
  const OJson gen = OJson::parse(gen_text, nullptr, false);
  if (gen.is_object()) {
    OJson& ids = hybrid ? c["text_config"] : c;
    if (gen.contains("bos_token_id")) ids["bos_token_id"] = gen["bos_token_id"];
    if (gen.contains("eos_token_id")) ids["eos_token_id"] = gen["eos_token_id"];
    std::ofstream(out_dir + "/generation_config.json") << gen.dump(2) << "\n";
  }
  std::ofstream(out_dir + "/config.json") << c.dump(2) << "\n";

  const float stdev = 0.02f;
  SynthSummary sum;
  OJson weight_map = OJson::object();
  const int64_t shards = opt.layers + 1;
  auto flush = [&](SafetensorsWriter& w, int64_t index) -> Status {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05lld-of-%05lld.safetensors",
                  static_cast<long long>(index + 1), static_cast<long long>(shards));
    MX_RETURN_IF_ERROR(w.write(out_dir + "/" + file));
    sum.bytes += w.data_bytes();
    ++sum.shards;
    if (opt.progress) opt.progress(sum.shards, shards);
    return Status::ok();
  };
  auto add = [&](SafetensorsWriter& w, int64_t shard, const std::string& name, const Shape& shape,
                 float sd, float constant = 0.0f) -> Status {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05lld-of-%05lld.safetensors",
                  static_cast<long long>(shard + 1), static_cast<long long>(shards));
    weight_map[name] = file;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    sum.parameters += n;
    return add_tensor(w, name, shape, opt.seed, sd, constant);
  };
  {
    SafetensorsWriter w;
    MX_RETURN_IF_ERROR(add(w, 0, pre + "embed_tokens.weight", {vocab, hid}, stdev));
    MX_RETURN_IF_ERROR(add(w, 0, pre + "norm.weight", {hid}, 0.0f, norm_one));
    MX_RETURN_IF_ERROR(add(w, 0, "lm_head.weight", {vocab, hid}, stdev));
    MX_RETURN_IF_ERROR(flush(w, 0));
  }
  for (int64_t l = 0; l < opt.layers; ++l) {
    SafetensorsWriter w;
    const int64_t s = l + 1;
    const std::string p = pre + "layers." + std::to_string(l) + ".";
    MX_RETURN_IF_ERROR(add(w, s, p + "input_layernorm.weight", {hid}, 0.0f, norm_one));
    MX_RETURN_IF_ERROR(add(w, s, p + "post_attention_layernorm.weight", {hid}, 0.0f, norm_one));
    if (hybrid) {
      MX_RETURN_IF_ERROR(add_qwen3_5_layer(t, l, p, stdev, add, w, s));
      MX_RETURN_IF_ERROR(flush(w, s));
      continue;
    }
    MX_RETURN_IF_ERROR(add_qwen3_layer(c, p, stdev, add, w, s));
    MX_RETURN_IF_ERROR(flush(w, s));
  }
  const OJson index = {{"metadata", {{"total_size", sum.bytes}}}, {"weight_map", weight_map}};
  std::ofstream(out_dir + "/model.safetensors.index.json") << index.dump(2) << "\n";
  return sum;
}

}  // namespace mx
