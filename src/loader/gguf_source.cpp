#include "loader/gguf_source.h"

#include <cmath>
#include <map>

#include "formats/half.h"

namespace mx {
namespace {

// What the converter did to a tensor's values, undone at load.
enum class Undo {
  kNone,
  kNegExp,    // ssm_a = -exp(A_log)
  kSqueezed,  // conv1d [C, 1, K] stored as [C, K]
};

// llama.cpp's per-layer tensor names (llama-arch.cpp's LLM_TENSOR_NAMES for qwen3, qwen3moe,
// qwen35, qwen35moe and qwen3next) and the Hugging Face module each one is.
struct NameRule {
  std::string_view gguf;
  std::string_view hf;
  bool expert_bank = false;
  Undo undo = Undo::kNone;
};
constexpr NameRule kLayerNames[] = {
    {"attn_norm", "input_layernorm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"post_attention_norm", "post_attention_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"attn_qkv", "linear_attn.in_proj_qkv"},
    {"attn_gate", "linear_attn.in_proj_z"},
    {"ssm_beta", "linear_attn.in_proj_b"},
    {"ssm_alpha", "linear_attn.in_proj_a"},
    {"ssm_out", "linear_attn.out_proj"},
    {"ssm_in", "linear_attn.in_proj_qkvz"},
    {"ssm_ba", "linear_attn.in_proj_ba"},
    {"ssm_norm", "linear_attn.norm"},
    {"ssm_conv1d", "linear_attn.conv1d", false, Undo::kSqueezed},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_exps", "mlp.experts.gate_proj", true},
    {"ffn_up_exps", "mlp.experts.up_proj", true},
    {"ffn_down_exps", "mlp.experts.down_proj", true},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
};
// Per-layer tensors whose whole name, suffix included, maps to a parameter without one.
constexpr NameRule kLayerParams[] = {
    {"ssm_a", "linear_attn.A_log", false, Undo::kNegExp},
    {"ssm_dt.bias", "linear_attn.dt_bias"},
};
// The nextn block's own tensors: the MTP head's, outside its decoder layer.
constexpr NameRule kNextnNames[] = {
    {"nextn.eh_proj", "mtp.fc"},
    {"nextn.enorm", "mtp.pre_fc_norm_embedding"},
    {"nextn.hnorm", "mtp.pre_fc_norm_hidden"},
    {"nextn.shared_head_norm", "mtp.norm"},
};
constexpr NameRule kGlobalNames[] = {
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
};

struct Mapped {
  std::string hf;  // without the ".weight"/".bias" suffix
  std::string suffix;
  bool expert_bank = false;
  Undo undo = Undo::kNone;
};

Mapped mapped(std::string prefix, const NameRule& r, std::string suffix) {
  return {prefix + std::string(r.hf), std::move(suffix), r.expert_bank, r.undo};
}

// "blk.3.attn_q.weight" -> {"model.layers.3.self_attn.q_proj", ".weight"}; blocks from
// first_mtp on are "mtp.layers.K."; unknown names map to themselves.
Mapped map_name(const std::string& g, int64_t first_mtp) {
  Mapped m{g, ""};
  const size_t dot = g.rfind('.');
  if (dot == std::string::npos) return m;
  const std::string stem = g.substr(0, dot), suffix = g.substr(dot);
  for (const NameRule& r : kGlobalNames) {
    if (stem == r.gguf) return mapped("", r, suffix);
  }
  if (g.rfind("blk.", 0) != 0) return m;
  const size_t d2 = g.find('.', 4);
  if (d2 == std::string::npos || d2 == 4 || d2 + 1 == g.size()) return m;
  const std::string digits = g.substr(4, d2 - 4), whole = g.substr(d2 + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6) return m;
  const int64_t layer = std::stoll(digits);
  const std::string rest = d2 < dot ? stem.substr(d2 + 1) : "";
  const bool mtp = layer >= first_mtp;
  const std::string prefix = mtp ? "mtp.layers." + std::to_string(layer - first_mtp) + "."
                                 : "model.layers." + std::to_string(layer) + ".";
  for (const NameRule& r : kLayerParams) {
    if (whole == r.gguf) return mapped(prefix, r, "");
  }
  for (const NameRule& r : kLayerNames) {
    if (rest == r.gguf) return mapped(prefix, r, suffix);
  }
  for (const NameRule& r : kNextnNames) {
    if (mtp && rest == r.gguf) return mapped("", r, suffix);
  }
  return m;
}

struct Entry {
  const GgufTensorInfo* info = nullptr;
  int64_t expert = -1;  // a slice of a 3-D expert bank
  Undo undo = Undo::kNone;
};

class GgufSource : public WeightSource {
 public:
  GgufSource(std::shared_ptr<const GgufFile> f, int64_t first_mtp) : file_(std::move(f)) {
    for (const GgufTensorInfo& t : file_->tensors()) {
      const Mapped m = map_name(t.name, first_mtp);
      // A bank of more experts than any model has is left under its own name (and fails the
      // load as a tensor no module reads) rather than expanded into views.
      if (!m.expert_bank || t.ne.size() != 3 || t.ne[2] > kMaxExperts) {
        entries_[m.hf + m.suffix] = {&t, -1, m.undo};
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

// A_log from the stored -exp(A_log), in FP32 as the reference takes its logarithm.
Result<Tensor> log_of_negated(const Tensor& t, const std::string& what) {
  const Tensor c = t.is_contiguous() ? t : t.contiguous_copy();
  Tensor out = Tensor::empty(DType::kF32, c.shape());
  float* o = out.mutable_data_as<float>();
  for (int64_t i = 0; i < c.numel(); ++i) {
    const uint16_t h = c.dtype() == DType::kF32 ? 0 : c.data_as<uint16_t>()[i];
    const float x = c.dtype() == DType::kF32    ? c.data_as<float>()[i]
                    : c.dtype() == DType::kBF16 ? bf16_to_float(h)
                                                : fp16_to_float(h);
    if (!(x < 0) || !std::isfinite(x)) {
      return invalid_argument("tensor '" + what + "' holds " + std::to_string(x) + " at " +
                              std::to_string(i) +
                              "; it stores -exp(A_log), which is negative and finite");
    }
    o[i] = std::log(-x);
  }
  return out;
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
  Tensor v = view(t, t.data, t.bytes, dt, shape);
  if (e.undo == Undo::kSqueezed && shape.size() == 2) v = v.reshape({shape[0], 1, shape[1]});
  if (e.undo == Undo::kNegExp) {
    MX_ASSIGN_OR_RETURN(v, log_of_negated(v, t.name));
  }
  mark_used(name);
  return v;
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
  // llama-quantize writes a one-row weight (ffn_gate_inp_shexp) as a vector.
  const bool vector = e.expert < 0 && t.ne.size() == 1 && out == 1 && t.ne[0] == in;
  if (!vector && (t.ne.size() != dims || t.ne[0] != in || t.ne[1] != out)) {
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

}  // namespace

std::string gguf_to_hf_name(const std::string& gguf_name, int64_t first_mtp_layer) {
  const Mapped m = map_name(gguf_name, first_mtp_layer);
  return m.hf + m.suffix;
}

Result<GgufCheckpoint> open_gguf_source(const std::string& path) {
  MX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  GgufCheckpoint ck;
  ck.file = std::make_shared<const GgufFile>(std::move(f));
  MX_ASSIGN_OR_RETURN(ck.config, model_config_from_gguf(*ck.file));
  ck.weights = std::make_unique<GgufSource>(ck.file, ck.config.num_layers);
  return ck;
}

}  // namespace mx
