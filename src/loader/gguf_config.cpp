#include "loader/gguf_config.h"

#include "loader/checkpoint_format.h"

namespace mx {
namespace {

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

Result<int64_t> positive_int(const GgufFile& f, const std::string& key) {
  MX_ASSIGN_OR_RETURN(int64_t v, f.get_int(key));
  MX_RETURN_IF_ERROR(check_positive(f, key, v));
  return v;
}

const ArchInfo* arch_of_gguf(const std::string& name) {
  for (const ArchInfo& a : supported_archs()) {
    if (!a.gguf_arch.empty() && a.gguf_arch == name) return &a;
  }
  return nullptr;
}

Status read_moe_keys(const GgufFile& f, const std::string& p, ModelConfig* c) {
  MX_ASSIGN_OR_RETURN(c->num_experts, positive_int(f, p + "expert_count"));
  MX_ASSIGN_OR_RETURN(c->num_experts_per_tok, positive_int(f, p + "expert_used_count"));
  MX_ASSIGN_OR_RETURN(c->moe_intermediate_size, positive_int(f, p + "expert_feed_forward_length"));
  if (c->num_experts_per_tok > c->num_experts) {
    return invalid_argument(f.path() + ": " + p + "expert_used_count " +
                            std::to_string(c->num_experts_per_tok) + " exceeds expert_count " +
                            std::to_string(c->num_experts));
  }
  // llama.cpp renormalizes the chosen experts' weights for qwen3moe, qwen35moe and qwen3next;
  // every layer is sparse.
  c->norm_topk_prob = true;
  c->decoder_sparse_step = 1;
  if (c->is_hybrid()) {
    MX_ASSIGN_OR_RETURN(c->shared_expert_intermediate_size,
                        int_or(f, p + "expert_shared_feed_forward_length", 0));
    if (c->shared_expert_intermediate_size < 0 ||
        c->shared_expert_intermediate_size > kMaxConfigSize) {
      return check_positive(f, p + "expert_shared_feed_forward_length",
                            c->shared_expert_intermediate_size);
    }
  }
  return Status::ok();
}

// Which layers are recurrent: `attention.recurrent_layers` (one flag per block, the MTP blocks
// included), else every full_attention_interval-th layer (1-based) is full attention.
Status read_layer_kinds(const GgufFile& f, const std::string& p, ModelConfig* c) {
  const std::string key = p + "attention.recurrent_layers";
  if (f.find(key) != nullptr) {
    MX_ASSIGN_OR_RETURN(const GgufValue* a, f.get_array(key, GgufValueType::kBool));
    if (static_cast<int64_t>(a->array.size()) < c->num_layers) {
      return invalid_argument(f.path() + ": " + key + " has " + std::to_string(a->array.size()) +
                              " entries for " + std::to_string(c->num_layers) + " layers");
    }
    for (int64_t i = 0; i < c->num_layers; ++i) {
      c->layer_kinds[static_cast<size_t>(i)] = a->array[static_cast<size_t>(i)].b
                                                   ? LayerKind::kLinearAttention
                                                   : LayerKind::kFullAttention;
    }
    return Status::ok();
  }
  MX_ASSIGN_OR_RETURN(int64_t every, int_or(f, p + "full_attention_interval", 4));
  MX_RETURN_IF_ERROR(check_positive(f, p + "full_attention_interval", every));
  for (int64_t i = 0; i < c->num_layers; ++i) {
    c->layer_kinds[static_cast<size_t>(i)] =
        (i + 1) % every == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention;
  }
  return Status::ok();
}

// Gated DeltaNet and gated attention (qwen35, qwen35moe, qwen3next). The converter stores the
// zero-centred norms with their 1 added, so they load as plain norms, and value heads tiled.
Status read_hybrid_keys(const GgufFile& f, const std::string& p, ModelConfig* c) {
  c->zero_centered_norms = false;
  c->attn_output_gate = true;
  MX_ASSIGN_OR_RETURN(c->linear_conv_kernel_dim, positive_int(f, p + "ssm.conv_kernel"));
  MX_ASSIGN_OR_RETURN(c->linear_key_head_dim, positive_int(f, p + "ssm.state_size"));
  MX_ASSIGN_OR_RETURN(c->linear_num_key_heads, positive_int(f, p + "ssm.group_count"));
  MX_ASSIGN_OR_RETURN(c->linear_num_value_heads, positive_int(f, p + "ssm.time_step_rank"));
  MX_ASSIGN_OR_RETURN(int64_t inner, positive_int(f, p + "ssm.inner_size"));
  if (inner % c->linear_num_value_heads != 0 ||
      c->linear_num_value_heads % c->linear_num_key_heads != 0) {
    return invalid_argument(
        f.path() + ": " + p + "ssm.inner_size " + std::to_string(inner) +
        " must split into ssm.time_step_rank " + std::to_string(c->linear_num_value_heads) +
        " value heads, a multiple of ssm.group_count " + std::to_string(c->linear_num_key_heads));
  }
  c->linear_value_head_dim = inner / c->linear_num_value_heads;
  // The recurrent state of one layer, nv x dk x dv floats, must stay addressable.
  if (c->linear_num_value_heads * c->linear_key_head_dim > (int64_t{1} << 40) / inner) {
    return invalid_argument(f.path() + ": ssm.state_size x ssm.inner_size exceeds 2^40");
  }
  const ArchLayout& layout = checkpoint_arch_layout("gguf", c->arch);
  c->deltanet_fused_ba = layout.deltanet_fused_ba;
  c->linear_v_heads_tiled =
      layout.v_heads_tiled && c->linear_num_value_heads != c->linear_num_key_heads;
  // Files made before the converter split Qwen3-Next's qkvz hold it fused, as ssm_in.
  for (const GgufTensorInfo& t : f.tensors()) {
    const std::string& n = t.name;
    const std::string_view tail = ".ssm_in.weight";
    if (n.size() > tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0) {
      c->deltanet_fused_qkvz = true;
    }
  }
  return read_layer_kinds(f, p, c);
}

// block_count counts the nextn (MTP) blocks too; they sit after the decoder's layers.
Status read_layer_count(const GgufFile& f, const std::string& p, ModelConfig* c) {
  MX_ASSIGN_OR_RETURN(int64_t blocks, positive_int(f, p + "block_count"));
  MX_ASSIGN_OR_RETURN(c->mtp_num_hidden_layers, int_or(f, p + "nextn_predict_layers", 0));
  if (c->mtp_num_hidden_layers < 0 || c->mtp_num_hidden_layers >= blocks) {
    return invalid_argument(f.path() + ": " + p + "nextn_predict_layers " +
                            std::to_string(c->mtp_num_hidden_layers) +
                            " leaves no decoder layer of block_count " + std::to_string(blocks));
  }
  c->num_layers = blocks - c->mtp_num_hidden_layers;
  if (c->num_layers > kMaxLayers) {
    return invalid_argument(f.path() + ": " + p + "block_count " + std::to_string(blocks) +
                            " exceeds " + std::to_string(kMaxLayers));
  }
  return Status::ok();
}

Status read_attention_keys(const GgufFile& f, const std::string& p, ModelConfig* c) {
  MX_ASSIGN_OR_RETURN(c->hidden_size, positive_int(f, p + "embedding_length"));
  MX_ASSIGN_OR_RETURN(c->num_heads, positive_int(f, p + "attention.head_count"));
  MX_ASSIGN_OR_RETURN(c->num_kv_heads, int_or(f, p + "attention.head_count_kv", c->num_heads));
  MX_RETURN_IF_ERROR(check_positive(f, p + "attention.head_count_kv", c->num_kv_heads));
  if (c->num_heads % c->num_kv_heads != 0) {
    return invalid_argument(f.path() + ": attention.head_count " + std::to_string(c->num_heads) +
                            " is not a multiple of head_count_kv " +
                            std::to_string(c->num_kv_heads));
  }
  MX_ASSIGN_OR_RETURN(c->head_dim,
                      int_or(f, p + "attention.key_length", c->hidden_size / c->num_heads));
  MX_ASSIGN_OR_RETURN(int64_t vdim, int_or(f, p + "attention.value_length", c->head_dim));
  MX_RETURN_IF_ERROR(check_positive(f, p + "attention.key_length", c->head_dim));
  if (vdim != c->head_dim || c->head_dim % 2 != 0) {
    return invalid_argument(f.path() + ": attention.key_length " + std::to_string(c->head_dim) +
                            " and value_length " + std::to_string(vdim) +
                            " must be equal and even");
  }
  // Partial rotary is the hybrids' (a quarter of each head); their M-RoPE sections reduce to
  // plain RoPE over text positions.
  MX_ASSIGN_OR_RETURN(c->rotary_dim, int_or(f, p + "rope.dimension_count", c->head_dim));
  if (c->rotary_dim != c->head_dim && !c->is_hybrid()) {
    return unimplemented(f.path() + ": rope.dimension_count " + std::to_string(c->rotary_dim) +
                         " (partial rotary) is not supported for " + c->model_type);
  }
  if (c->rotary_dim <= 0 || c->rotary_dim > c->head_dim || c->rotary_dim % 2 != 0) {
    return invalid_argument(f.path() + ": rope.dimension_count " + std::to_string(c->rotary_dim) +
                            " must be even and within key_length " + std::to_string(c->head_dim));
  }
  if (f.find(p + "rope.scaling.type") != nullptr) {
    MX_ASSIGN_OR_RETURN(std::string s, f.get_string(p + "rope.scaling.type"));
    if (s != "none")
      return unimplemented(f.path() + ": rope.scaling.type '" + s + "' is not supported");
  }
  MX_ASSIGN_OR_RETURN(c->rms_norm_eps, f.get_float(p + "attention.layer_norm_rms_epsilon"));
  if (f.find(p + "rope.freq_base") != nullptr) {
    MX_ASSIGN_OR_RETURN(c->rope_theta, f.get_float(p + "rope.freq_base"));
  }
  if (!(c->rms_norm_eps > 0) || !(c->rope_theta > 0)) {
    return invalid_argument(f.path() + ": rms epsilon and rope.freq_base must be positive");
  }
  return Status::ok();
}

}  // namespace

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
  c.weight_prefix = checkpoint_arch_layout("gguf", c.arch).weight_prefix;
  const std::string p = arch + ".";
  MX_RETURN_IF_ERROR(read_layer_count(f, p, &c));
  MX_RETURN_IF_ERROR(read_attention_keys(f, p, &c));
  MX_ASSIGN_OR_RETURN(c.intermediate_size, int_or(f, p + "feed_forward_length", 0));
  MX_ASSIGN_OR_RETURN(c.max_position_embeddings, positive_int(f, p + "context_length"));
  if (f.find(p + "vocab_size") != nullptr) {
    MX_ASSIGN_OR_RETURN(c.vocab_size, f.get_int(p + "vocab_size"));
  } else if (const GgufTensorInfo* e = f.tensor("token_embd.weight"); e && e->ne.size() == 2) {
    c.vocab_size = e->ne[1];
  }
  MX_RETURN_IF_ERROR(check_positive(f, "the vocabulary size (token_embd rows)", c.vocab_size));
  c.tie_word_embeddings = f.tensor("output.weight") == nullptr;
  c.layer_kinds.assign(static_cast<size_t>(c.num_layers), LayerKind::kFullAttention);
  MX_ASSIGN_OR_RETURN(c.bos_token_id, int_or(f, "tokenizer.ggml.bos_token_id", -1));
  MX_ASSIGN_OR_RETURN(c.eos_token_id, int_or(f, "tokenizer.ggml.eos_token_id", -1));
  if (c.is_hybrid()) MX_RETURN_IF_ERROR(read_hybrid_keys(f, p, &c));
  if (c.has_moe()) {
    MX_RETURN_IF_ERROR(read_moe_keys(f, p, &c));
  } else {
    MX_RETURN_IF_ERROR(check_positive(f, p + "feed_forward_length", c.intermediate_size));
  }
  MX_RETURN_IF_ERROR(validate_model_config(c, f.path()));
  return c;
}

}  // namespace mx
