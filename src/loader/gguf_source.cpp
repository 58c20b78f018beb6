#include "loader/gguf_source.h"

#include <map>

namespace mx {
namespace {

// llama.cpp's per-layer tensor names (llama-arch.cpp's LLM_TENSOR_NAMES for qwen3 and
// qwen3moe) and the Hugging Face module each one is.
struct NameRule {
  std::string_view gguf;
  std::string_view hf;
  bool expert_bank;
};
constexpr NameRule kLayerNames[] = {
    {"attn_norm", "input_layernorm", false},
    {"ffn_norm", "post_attention_layernorm", false},
    {"attn_q", "self_attn.q_proj", false},
    {"attn_k", "self_attn.k_proj", false},
    {"attn_v", "self_attn.v_proj", false},
    {"attn_output", "self_attn.o_proj", false},
    {"attn_q_norm", "self_attn.q_norm", false},
    {"attn_k_norm", "self_attn.k_norm", false},
    {"ffn_gate", "mlp.gate_proj", false},
    {"ffn_up", "mlp.up_proj", false},
    {"ffn_down", "mlp.down_proj", false},
    {"ffn_gate_inp", "mlp.gate", false},
    {"ffn_gate_exps", "mlp.experts.gate_proj", true},
    {"ffn_up_exps", "mlp.experts.up_proj", true},
    {"ffn_down_exps", "mlp.experts.down_proj", true},
};
constexpr NameRule kGlobalNames[] = {
    {"token_embd", "model.embed_tokens", false},
    {"output_norm", "model.norm", false},
    {"output", "lm_head", false},
};

struct Mapped {
  std::string hf;  // without the ".weight"/".bias" suffix
  std::string suffix;
  bool expert_bank = false;
};

// "blk.3.attn_q.weight" -> {"model.layers.3.self_attn.q_proj", ".weight"}; unknown names map
// to themselves.
Mapped map_name(const std::string& g) {
  Mapped m{g, "", false};
  const size_t dot = g.rfind('.');
  if (dot == std::string::npos) return m;
  const std::string stem = g.substr(0, dot), suffix = g.substr(dot);
  for (const NameRule& r : kGlobalNames) {
    if (stem == r.gguf) return {std::string(r.hf), suffix, false};
  }
  if (stem.rfind("blk.", 0) != 0) return m;
  const size_t d2 = stem.find('.', 4);
  if (d2 == std::string::npos || d2 == 4) return m;
  const std::string layer = stem.substr(4, d2 - 4), rest = stem.substr(d2 + 1);
  if (layer.find_first_not_of("0123456789") != std::string::npos || layer.size() > 6) return m;
  for (const NameRule& r : kLayerNames) {
    if (rest == r.gguf) {
      return {"model.layers." + std::to_string(std::stoll(layer)) + "." + std::string(r.hf), suffix,
              r.expert_bank};
    }
  }
  return m;
}

struct Entry {
  const GgufTensorInfo* info = nullptr;
  int64_t expert = -1;  // a slice of a 3-D expert bank
};

class GgufSource : public WeightSource {
 public:
  explicit GgufSource(std::shared_ptr<const GgufFile> f) : file_(std::move(f)) {
    for (const GgufTensorInfo& t : file_->tensors()) {
      const Mapped m = map_name(t.name);
      // A bank of more experts than any model has is left under its own name (and fails the
      // load as a tensor no module reads) rather than expanded into views.
      if (!m.expert_bank || t.ne.size() != 3 || t.ne[2] > kMaxExperts) {
        entries_[m.hf + m.suffix] = {&t, -1};
        continue;
      }
      // "model.layers.N.mlp.experts.gate_proj" -> "...experts.E.gate_proj" for each E.
      const size_t cut = m.hf.rfind('.');
      for (int64_t e = 0; e < t.ne[2]; ++e) {
        entries_[m.hf.substr(0, cut) + "." + std::to_string(e) + m.hf.substr(cut) + m.suffix] = {&t,
                                                                                                 e};
      }
    }
  }
  const std::string& label() const override { return file_->path(); }
  std::string_view kind() const override { return "gguf"; }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [n, _] : entries_) out.push_back(n);
    return out;
  }
  bool has(const std::string& name) const override { return entries_.count(name) != 0; }
  std::string stored_type(const std::string& name) const override {
    auto it = entries_.find(name);
    return it == entries_.end() ? "" : std::string(ggml_type_info(it->second.info->type).name);
  }
  Result<Tensor> tensor(const std::string& name) const override;
  Result<StoredWeight> weight(const std::string& module, int64_t out, int64_t in) const override;

 private:
  Result<Entry> entry(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return not_found(file_->path() + ": no tensor maps to '" + name + "'");
    }
    return it->second;
  }
  // A view of `bytes` at `data` inside the part file of `info`.
  Tensor view(const GgufTensorInfo& info, const uint8_t* data, size_t bytes, DType dt,
              const Shape& shape) const {
    auto storage =
        Storage::view_of_file(file_->files()[static_cast<size_t>(info.file)], data, bytes);
    return Tensor::from_storage(std::move(storage), dt, shape);
  }
  std::shared_ptr<const GgufFile> file_;
  std::map<std::string, Entry> entries_;
};

std::string describe_ne(const std::vector<int64_t>& ne) {
  std::string s = "ne {";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

Result<Tensor> GgufSource::tensor(const std::string& name) const {
  MX_ASSIGN_OR_RETURN(Entry e, entry(name));
  const GgufTensorInfo& t = *e.info;
  DType dt;
  switch (t.type) {
    case GgmlType::kF32:
      dt = DType::kF32;
      break;
    case GgmlType::kF16:
      dt = DType::kF16;
      break;
    case GgmlType::kBF16:
      dt = DType::kBF16;
      break;
    default:
      return invalid_argument(file_->path() + ": tensor '" + t.name + "' is " +
                              std::string(ggml_type_info(t.type).name) +
                              " where a float tensor (F32, F16, BF16) belongs");
  }
  if (e.expert >= 0) return invalid_argument(name + ": an expert slice is not a plain tensor");
  Shape shape(t.ne.rbegin(), t.ne.rend());
  mark_used(name);
  return view(t, t.data, t.bytes, dt, shape);
}

Result<StoredWeight> GgufSource::weight(const std::string& module, int64_t out, int64_t in) const {
  StoredWeight w;
  w.name = module + ".weight";
  w.encoding = WeightEncoding::kGgml;
  w.out = out;
  w.in = in;
  MX_ASSIGN_OR_RETURN(Entry e, entry(w.name));
  const GgufTensorInfo& t = *e.info;
  const size_t dims = e.expert >= 0 ? 3 : 2;
  if (t.ne.size() != dims || t.ne[0] != in || t.ne[1] != out) {
    return invalid_argument(file_->path() + ": tensor '" + t.name + "' has " + describe_ne(t.ne) +
                            " but the config implies {" + std::to_string(in) + ", " +
                            std::to_string(out) + (dims == 3 ? ", experts}" : "}") + " for '" +
                            w.name + "'");
  }
  const int64_t rb = ggml_row_bytes(t.type, in);
  const uint64_t bytes = static_cast<uint64_t>(rb) * static_cast<uint64_t>(out);
  const uint8_t* data = t.data + (e.expert >= 0 ? bytes * static_cast<uint64_t>(e.expert) : 0);
  w.ggml = t.type;
  w.data = view(t, data, bytes, DType::kU8, {out, rb});
  mark_used(w.name);
  return w;
}

Result<int64_t> int_or(const GgufFile& f, const std::string& key, int64_t fallback) {
  if (f.find(key) == nullptr) return fallback;
  return f.get_int(key);
}

Status check_positive(const GgufFile& f, const std::string& key, int64_t v) {
  if (v <= 0 || v > kMaxConfigSize) {
    return invalid_argument(f.path() + ": " + key + " must be between 1 and " +
                            std::to_string(kMaxConfigSize) + " (got " + std::to_string(v) + ")");
  }
  return Status::ok();
}

const ArchInfo* arch_of_gguf(const std::string& name) {
  for (const ArchInfo& a : supported_archs()) {
    if (!a.gguf_arch.empty() && a.gguf_arch == name) return &a;
  }
  return nullptr;
}

Status read_moe_keys(const GgufFile& f, const std::string& p, ModelConfig* c) {
  MX_ASSIGN_OR_RETURN(c->num_experts, f.get_int(p + "expert_count"));
  MX_ASSIGN_OR_RETURN(c->num_experts_per_tok, f.get_int(p + "expert_used_count"));
  MX_ASSIGN_OR_RETURN(c->moe_intermediate_size, f.get_int(p + "expert_feed_forward_length"));
  MX_RETURN_IF_ERROR(check_positive(f, p + "expert_count", c->num_experts));
  MX_RETURN_IF_ERROR(check_positive(f, p + "expert_used_count", c->num_experts_per_tok));
  MX_RETURN_IF_ERROR(check_positive(f, p + "expert_feed_forward_length", c->moe_intermediate_size));
  if (c->num_experts_per_tok > c->num_experts) {
    return invalid_argument(f.path() + ": " + p + "expert_used_count " +
                            std::to_string(c->num_experts_per_tok) + " exceeds expert_count " +
                            std::to_string(c->num_experts));
  }
  // llama.cpp renormalizes the chosen experts' weights for qwen3moe; every layer is sparse.
  c->norm_topk_prob = true;
  c->decoder_sparse_step = 1;
  return Status::ok();
}

}  // namespace

std::string gguf_to_hf_name(const std::string& gguf_name) {
  const Mapped m = map_name(gguf_name);
  return m.hf + m.suffix;
}

Result<ModelConfig> model_config_from_gguf(const GgufFile& f) {
  MX_ASSIGN_OR_RETURN(std::string arch, f.get_string("general.architecture"));
  const ArchInfo* info = arch_of_gguf(arch);
  if (info == nullptr) {
    std::string list;
    for (const ArchInfo& a : supported_archs()) {
      if (!a.gguf_arch.empty()) list += (list.empty() ? "" : ", ") + std::string(a.gguf_arch);
    }
    return unimplemented(f.path() + ": general.architecture '" + arch +
                         "' is not supported (supported: " + list + ")");
  }
  ModelConfig c;
  c.arch = info->arch;
  c.hf_class = info->hf_class;
  c.model_type = info->model_type;
  const std::string p = arch + ".";
  MX_ASSIGN_OR_RETURN(c.num_layers, f.get_int(p + "block_count"));
  if (c.num_layers > kMaxLayers) {
    return invalid_argument(f.path() + ": " + p + "block_count " + std::to_string(c.num_layers) +
                            " exceeds " + std::to_string(kMaxLayers));
  }
  MX_ASSIGN_OR_RETURN(c.hidden_size, f.get_int(p + "embedding_length"));
  MX_ASSIGN_OR_RETURN(c.num_heads, f.get_int(p + "attention.head_count"));
  MX_ASSIGN_OR_RETURN(c.num_kv_heads, int_or(f, p + "attention.head_count_kv", c.num_heads));
  MX_ASSIGN_OR_RETURN(c.intermediate_size, int_or(f, p + "feed_forward_length", 0));
  MX_ASSIGN_OR_RETURN(c.max_position_embeddings, f.get_int(p + "context_length"));
  MX_RETURN_IF_ERROR(check_positive(f, p + "context_length", c.max_position_embeddings));
  for (const char* k :
       {"block_count", "embedding_length", "attention.head_count", "attention.head_count_kv"}) {
    MX_ASSIGN_OR_RETURN(int64_t v, f.get_int(p + k));
    MX_RETURN_IF_ERROR(check_positive(f, p + k, v));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument(f.path() + ": attention.head_count " + std::to_string(c.num_heads) +
                            " is not a multiple of head_count_kv " +
                            std::to_string(c.num_kv_heads));
  }
  MX_ASSIGN_OR_RETURN(c.head_dim,
                      int_or(f, p + "attention.key_length", c.hidden_size / c.num_heads));
  MX_ASSIGN_OR_RETURN(int64_t vdim, int_or(f, p + "attention.value_length", c.head_dim));
  MX_RETURN_IF_ERROR(check_positive(f, p + "attention.key_length", c.head_dim));
  if (vdim != c.head_dim || c.head_dim % 2 != 0) {
    return invalid_argument(f.path() + ": attention.key_length " + std::to_string(c.head_dim) +
                            " and value_length " + std::to_string(vdim) +
                            " must be equal and even");
  }
  MX_ASSIGN_OR_RETURN(int64_t rot, int_or(f, p + "rope.dimension_count", c.head_dim));
  if (rot != c.head_dim) {
    return unimplemented(f.path() + ": rope.dimension_count " + std::to_string(rot) +
                         " (partial rotary) is not supported for " + arch);
  }
  if (f.find(p + "rope.scaling.type") != nullptr) {
    MX_ASSIGN_OR_RETURN(std::string s, f.get_string(p + "rope.scaling.type"));
    if (s != "none")
      return unimplemented(f.path() + ": rope.scaling.type '" + s + "' is not supported");
  }
  MX_ASSIGN_OR_RETURN(c.rms_norm_eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (f.find(p + "rope.freq_base") != nullptr) {
    MX_ASSIGN_OR_RETURN(c.rope_theta, f.get_float(p + "rope.freq_base"));
  }
  if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0)) {
    return invalid_argument(f.path() + ": rms epsilon and rope.freq_base must be positive");
  }
  if (f.find(p + "vocab_size") != nullptr) {
    MX_ASSIGN_OR_RETURN(c.vocab_size, f.get_int(p + "vocab_size"));
  } else if (const GgufTensorInfo* e = f.tensor("token_embd.weight"); e && e->ne.size() == 2) {
    c.vocab_size = e->ne[1];
  }
  MX_RETURN_IF_ERROR(check_positive(f, "the vocabulary size (token_embd rows)", c.vocab_size));
  c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
  c.rotary_dim = c.head_dim;
  c.layer_kinds.assign(static_cast<size_t>(c.num_layers), LayerKind::kFullAttention);
  MX_ASSIGN_OR_RETURN(c.bos_token_id, int_or(f, "tokenizer.ggml.bos_token_id", -1));
  MX_ASSIGN_OR_RETURN(c.eos_token_id, int_or(f, "tokenizer.ggml.eos_token_id", -1));
  if (c.arch == Arch::kQwen3Moe) {
    MX_RETURN_IF_ERROR(read_moe_keys(f, p, &c));
  } else {
    MX_RETURN_IF_ERROR(check_positive(f, p + "feed_forward_length", c.intermediate_size));
  }
  MX_RETURN_IF_ERROR(validate_model_config(c, f.path()));
  return c;
}

Result<GgufCheckpoint> open_gguf_source(const std::string& path) {
  MX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  GgufCheckpoint ck;
  ck.file = std::make_shared<const GgufFile>(std::move(f));
  MX_ASSIGN_OR_RETURN(ck.config, model_config_from_gguf(*ck.file));
  ck.weights = std::make_unique<GgufSource>(ck.file);
  return ck;
}

}  // namespace mx
