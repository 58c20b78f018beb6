#include "loader/model_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <utility>

#include "core/json_util.h"
#include "core/mapped_file.h"
#include "loader/checkpoint_format.h"
#include "loader/vision_config.h"
#include "loader/weight_source.h"

namespace mx {

const std::vector<ArchInfo>& supported_archs() {
  static const std::vector<ArchInfo> kArchs = {
      {Arch::kQwen3, "Qwen3ForCausalLM", "qwen3", "qwen3"},
      {Arch::kQwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe", "qwen3moe"},
      {Arch::kQwen3_5, "Qwen3_5ForConditionalGeneration", "qwen3_5", "qwen35"},
      {Arch::kQwen3_5Moe, "Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe", "qwen35moe"},
      {Arch::kQwen3Next, "Qwen3NextForCausalLM", "qwen3_next", "qwen3next"},
  };
  return kArchs;
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!has_moe() || num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) {
    return false;
  }
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

namespace {

Status positive(const std::string& what, const char* key, int64_t v) {
  if (v <= 0 || v > kMaxConfigSize) {
    return invalid_argument(what + ": field '" + key + "' must be between 1 and " +
                            std::to_string(kMaxConfigSize) + " (got " + std::to_string(v) + ")");
  }
  return Status::ok();
}

// Fields that change the math and are not implemented: refused by name rather than loaded
// into a model that would silently compute something else.
// Qwen3.5's `layer_types` is parse_layer_kinds' to check, and its M-RoPE over text positions
// is plain RoPE, as in rope_parameters.
Status check_unimplemented_fields(const Json& j, bool qwen3_5, const std::string& what) {
  if (auto r = j.find("rope_scaling"); r != j.end() && !r->is_null()) {
    // {"rope_type": "default"} is plain RoPE, as transformers reads it.
    std::string type = "(no type)";
    if (r->is_object()) {
      for (const char* k : {"rope_type", "type"}) {
        if (auto t = r->find(k); t != r->end() && t->is_string()) type = t->get<std::string>();
      }
    }
    if (type != "default" && !(qwen3_5 && type == "mrope")) {
      return unimplemented(what + ": field 'rope_scaling' (" + type +
                           ") is not supported: only plain RoPE (rope_scaling null)");
    }
  }
  if (auto a = j.find("hidden_act"); a != j.end() && !a->is_null()) {
    if (!a->is_string() || *a != "silu") {
      return unimplemented(what + ": field 'hidden_act' is " + a->dump() +
                           "; only \"silu\" is supported");
    }
  }
  MX_ASSIGN_OR_RETURN(bool sliding, json_bool_or(j, "use_sliding_window", false, what));
  if (sliding) {
    return unimplemented(what +
                         ": field 'use_sliding_window' is true; sliding-window "
                         "attention is not supported");
  }
  if (auto lt = j.find("layer_types"); !qwen3_5 && lt != j.end() && lt->is_array()) {
    for (const Json& e : *lt) {
      if (e == "sliding_attention") {
        return unimplemented(what +
                             ": field 'layer_types' holds sliding_attention; "
                             "sliding-window attention is not supported");
      }
    }
  }
  MX_ASSIGN_OR_RETURN(bool bias, json_bool_or(j, "attention_bias", false, what));
  if (bias) {
    return unimplemented(what +
                         ": field 'attention_bias' is true; attention projections "
                         "with a bias are not supported");
  }
  return Status::ok();
}

Result<const ArchInfo*> find_arch(const Json& j, const std::string& what) {
  std::vector<std::string> names;
  if (auto a = j.find("architectures"); a != j.end() && !a->is_null()) {
    if (!a->is_array()) return invalid_argument(what + ": field 'architectures' must be a list");
    for (const Json& e : *a) {
      if (!e.is_string()) return invalid_argument(what + ": 'architectures' holds a non-string");
      names.push_back(e.get<std::string>());
    }
  }
  std::string model_type;
  if (auto m = j.find("model_type"); m != j.end() && m->is_string()) model_type = *m;
  for (const ArchInfo& info : supported_archs()) {
    for (const std::string& n : names) {
      if (n == info.hf_class) return &info;
    }
  }
  if (names.empty()) {
    for (const ArchInfo& info : supported_archs()) {
      if (model_type == info.model_type) return &info;
    }
  }
  std::string supported;
  for (const ArchInfo& info : supported_archs()) {
    supported += (supported.empty() ? "" : ", ") + std::string(info.hf_class);
  }
  const std::string found = !names.empty()        ? names.front()
                            : !model_type.empty() ? model_type
                                                  : "(none given)";
  return invalid_argument(what + ": unsupported architecture '" + found +
                          "' (supported: " + supported + ")");
}

// Which layers are linear attention: `layer_types`, else every full_attention_interval-th
// layer (1-based) is full attention.
Status parse_layer_kinds(const Json& j, const std::string& what, ModelConfig* c) {
  if (auto lt = j.find("layer_types"); lt != j.end() && !lt->is_null()) {
    if (!lt->is_array() || static_cast<int64_t>(lt->size()) != c->num_layers) {
      return invalid_argument(what + ": 'layer_types' must list one kind per layer (" +
                              std::to_string(c->num_layers) + "), got " +
                              (lt->is_array() ? std::to_string(lt->size()) : json_type_name(*lt)));
    }
    for (size_t i = 0; i < lt->size(); ++i) {
      const Json& e = (*lt)[i];
      const std::string kind = e.is_string() ? e.get<std::string>() : json_type_name(e);
      if (kind == "full_attention") {
        c->layer_kinds[i] = LayerKind::kFullAttention;
      } else if (kind == "linear_attention") {
        c->layer_kinds[i] = LayerKind::kLinearAttention;
      } else {
        return invalid_argument(what + ": layer_types[" + std::to_string(i) + "] is '" + kind +
                                "' (known: full_attention, linear_attention)");
      }
    }
    return Status::ok();
  }
  MX_ASSIGN_OR_RETURN(int64_t every, json_int_or(j, "full_attention_interval", 4, what));
  MX_RETURN_IF_ERROR(positive(what, "full_attention_interval", every));
  for (int64_t i = 0; i < c->num_layers; ++i) {
    c->layer_kinds[static_cast<size_t>(i)] =
        (i + 1) % every == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention;
  }
  return Status::ok();
}

// Qwen3.5's text model and Qwen3-Next share these fields.
Status parse_qwen3_5_fields(const Json& j, const std::string& what, ModelConfig* c) {
  c->zero_centered_norms = true;
  MX_ASSIGN_OR_RETURN(c->attn_output_gate, json_bool_or(j, "attn_output_gate", true, what));
  MX_ASSIGN_OR_RETURN(c->mtp_num_hidden_layers, json_int_or(j, "mtp_num_hidden_layers", 0, what));
  MX_RETURN_IF_ERROR(parse_layer_kinds(j, what, c));
  // Qwen3.5's default: RoPE on a quarter of each head.
  double partial = 0.25;
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    if (auto rt = rp->find("rope_type");
        rt != rp->end() && rt->is_string() && *rt != "default" && *rt != "mrope") {
      return unimplemented(what + ": rope_type '" + rt->get<std::string>() +
                           "' is not supported (default RoPE only)");
    }
    MX_ASSIGN_OR_RETURN(c->rope_theta, json_number_or(*rp, "rope_theta", c->rope_theta, what));
    MX_ASSIGN_OR_RETURN(partial, json_number_or(*rp, "partial_rotary_factor", partial, what));
  }
  MX_ASSIGN_OR_RETURN(partial, json_number_or(j, "partial_rotary_factor", partial, what));
  // The range first: the cast of an out-of-range double is undefined.
  c->rotary_dim = partial > 0 && partial <= 1
                      ? static_cast<int64_t>(static_cast<double>(c->head_dim) * partial)
                      : 0;
  if (c->rotary_dim % 2 != 0 || c->rotary_dim == 0) {
    return invalid_argument(what + ": partial_rotary_factor " + std::to_string(partial) +
                            " does not give an even rotary width of head_dim " +
                            std::to_string(c->head_dim));
  }
  if (auto rp = j.find("rope_parameters"); rp != j.end() && rp->is_object()) {
    MX_RETURN_IF_ERROR(parse_mrope_fields(*rp, what, c));
  }
  struct Field {
    const char* key;
    int64_t* out;
  };
  for (const Field& f : {Field{"linear_num_key_heads", &c->linear_num_key_heads},
                         Field{"linear_num_value_heads", &c->linear_num_value_heads},
                         Field{"linear_key_head_dim", &c->linear_key_head_dim},
                         Field{"linear_value_head_dim", &c->linear_value_head_dim},
                         Field{"linear_conv_kernel_dim", &c->linear_conv_kernel_dim}}) {
    MX_ASSIGN_OR_RETURN(*f.out, json_int(j, f.key, what));
    MX_RETURN_IF_ERROR(positive(what, f.key, *f.out));
  }
  // The recurrent state of one layer, nv x dk x dv floats, must stay addressable.
  if (c->linear_num_value_heads * c->linear_key_head_dim >
      (int64_t{1} << 40) / c->linear_value_head_dim) {
    return invalid_argument(what +
                            ": linear_num_value_heads x linear_key_head_dim x "
                            "linear_value_head_dim exceeds 2^40 state values per layer");
  }
  if (c->linear_num_value_heads % c->linear_num_key_heads != 0) {
    return invalid_argument(what + ": linear_num_value_heads (" +
                            std::to_string(c->linear_num_value_heads) +
                            ") is not a multiple of linear_num_key_heads (" +
                            std::to_string(c->linear_num_key_heads) + ")");
  }
  return Status::ok();
}

}  // namespace

Status validate_model_config(const ModelConfig& c, const std::string& what) {
  auto fail = [&](const std::string& why) { return invalid_argument(what + ": " + why); };
  for (const auto& [key, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                               {"hidden_size", c.hidden_size},
                               {"num_attention_heads", c.num_heads},
                               {"num_key_value_heads", c.num_kv_heads},
                               {"head_dim", c.head_dim},
                               {"max_position_embeddings", c.max_position_embeddings}}) {
    MX_RETURN_IF_ERROR(positive(what, key, v));
  }
  if (c.num_layers <= 0 || c.num_layers > kMaxLayers) {
    return fail("num_hidden_layers must be between 1 and " + std::to_string(kMaxLayers) + " (got " +
                std::to_string(c.num_layers) + ")");
  }
  if (static_cast<int64_t>(c.layer_kinds.size()) != c.num_layers) {
    return fail("one layer kind per layer is needed");
  }
  // The query projection's width; each factor alone is bounded, their product must be too.
  if (c.num_heads * c.head_dim > kMaxConfigSize) {
    return fail("num_attention_heads x head_dim (" + std::to_string(c.num_heads * c.head_dim) +
                ") exceeds " + std::to_string(kMaxConfigSize));
  }
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    return fail("num_attention_heads (" + std::to_string(c.num_heads) +
                ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_kv_heads) +
                ")");
  }
  if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0) {
    return fail("the rotary width " + std::to_string(c.rotary_dim) +
                " must be even and within head_dim " + std::to_string(c.head_dim));
  }
  // NaN and infinity pass a "> 0" test on one side or the other; both are refused.
  if (!std::isfinite(c.rope_theta) || c.rope_theta <= 0) {
    return fail("rope_theta must be a finite positive number (got " + std::to_string(c.rope_theta) +
                ")");
  }
  if (!std::isfinite(c.rms_norm_eps) || c.rms_norm_eps <= 0) {
    return fail("rms_norm_eps must be a finite positive number (got " +
                std::to_string(c.rms_norm_eps) + ")");
  }
  for (const auto& [key, v] :
       {std::pair<const char*, int64_t>{"intermediate_size", c.intermediate_size},
        {"moe_intermediate_size", c.moe_intermediate_size},
        {"shared_expert_intermediate_size", c.shared_expert_intermediate_size}}) {
    if (v < 0 || v > kMaxConfigSize) {
      return fail(std::string(key) + " must be between 0 and " + std::to_string(kMaxConfigSize) +
                  " (got " + std::to_string(v) + ")");
    }
  }
  if (c.has_moe()) {
    if (c.num_experts < 1 || c.num_experts > kMaxExperts) {
      return fail("num_experts must be between 1 and " + std::to_string(kMaxExperts) + " (got " +
                  std::to_string(c.num_experts) + ")");
    }
    if (c.num_experts_per_tok < 1 || c.num_experts_per_tok > c.num_experts) {
      return fail("num_experts_per_tok must be between 1 and num_experts (" +
                  std::to_string(c.num_experts) + "), got " +
                  std::to_string(c.num_experts_per_tok));
    }
  }
  return Status::ok();
}

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& what) {
  MX_ASSIGN_OR_RETURN(Json top, parse_json(json_text, what));
  if (!top.is_object()) return invalid_argument(what + ": not a JSON object");
  MX_ASSIGN_OR_RETURN(const ArchInfo* arch, find_arch(top, what));
  ModelConfig c;
  c.arch = arch->arch;
  c.hf_class = arch->hf_class;
  c.model_type = arch->model_type;
  // config.json is Hugging Face's, whether the weights are (safetensors) or msmodelslim's.
  const ArchLayout& layout = checkpoint_arch_layout("safetensors", c.arch);
  c.weight_prefix = layout.weight_prefix;
  c.deltanet_fused_qkvz = layout.deltanet_fused_qkvz;
  c.deltanet_fused_ba = layout.deltanet_fused_ba;
  c.linear_v_heads_tiled = layout.v_heads_tiled;
  const std::string object(layout.config_object);
  const bool wrapped = !object.empty();
  if (wrapped && (!top.contains(object) || !top[object].is_object())) {
    return invalid_argument(what + ": " + c.hf_class + " needs an object '" + object + "'");
  }
  const Json& j = wrapped ? top[object] : top;
  MX_RETURN_IF_ERROR(check_unimplemented_fields(j, c.is_hybrid(), what));
  MX_ASSIGN_OR_RETURN(c.vocab_size, json_int(j, "vocab_size", what));
  MX_ASSIGN_OR_RETURN(c.hidden_size, json_int(j, "hidden_size", what));
  MX_ASSIGN_OR_RETURN(c.num_layers, json_int(j, "num_hidden_layers", what));
  MX_ASSIGN_OR_RETURN(c.num_heads, json_int(j, "num_attention_heads", what));
  MX_RETURN_IF_ERROR(positive(what, "vocab_size", c.vocab_size));
  MX_RETURN_IF_ERROR(positive(what, "hidden_size", c.hidden_size));
  MX_RETURN_IF_ERROR(positive(what, "num_hidden_layers", c.num_layers));
  if (c.num_layers > kMaxLayers) {
    return invalid_argument(what + ": num_hidden_layers " + std::to_string(c.num_layers) +
                            " exceeds " + std::to_string(kMaxLayers));
  }
  MX_RETURN_IF_ERROR(positive(what, "num_attention_heads", c.num_heads));
  MX_ASSIGN_OR_RETURN(c.num_kv_heads, json_int_or(j, "num_key_value_heads", c.num_heads, what));
  MX_RETURN_IF_ERROR(positive(what, "num_key_value_heads", c.num_kv_heads));
  if (c.num_heads % c.num_kv_heads != 0) {
    return invalid_argument(what + ": num_attention_heads (" + std::to_string(c.num_heads) +
                            ") is not a multiple of num_key_value_heads (" +
                            std::to_string(c.num_kv_heads) + ")");
  }
  MX_ASSIGN_OR_RETURN(c.head_dim, json_int_or(j, "head_dim", c.hidden_size / c.num_heads, what));
  MX_RETURN_IF_ERROR(positive(what, "head_dim", c.head_dim));
  if (c.head_dim % 2 != 0) return invalid_argument(what + ": head_dim must be even for RoPE");
  if (c.is_hybrid() && c.has_moe()) {
    // Every layer may be MoE: a dense width is then absent.
    MX_ASSIGN_OR_RETURN(c.intermediate_size, json_int_or(j, "intermediate_size", 0, what));
  } else {
    MX_ASSIGN_OR_RETURN(c.intermediate_size, json_int(j, "intermediate_size", what));
    MX_RETURN_IF_ERROR(positive(what, "intermediate_size", c.intermediate_size));
  }
  MX_ASSIGN_OR_RETURN(c.rms_norm_eps, json_number_or(j, "rms_norm_eps", 1e-6, what));
  MX_ASSIGN_OR_RETURN(c.rope_theta, json_number_or(j, "rope_theta", 10000.0, what));
  MX_ASSIGN_OR_RETURN(c.max_position_embeddings,
                      json_int_or(j, "max_position_embeddings", 32768, what));
  MX_RETURN_IF_ERROR(positive(what, "max_position_embeddings", c.max_position_embeddings));
  MX_ASSIGN_OR_RETURN(c.tie_word_embeddings, json_bool_or(j, "tie_word_embeddings", false, what));
  MX_ASSIGN_OR_RETURN(c.attention_bias, json_bool_or(j, "attention_bias", false, what));
  MX_ASSIGN_OR_RETURN(c.bos_token_id, json_int_or(j, "bos_token_id", -1, what));
  // eos_token_id may be a list in some configs; the first entry is the primary one.
  if (auto e = j.find("eos_token_id");
      e != j.end() && e->is_array() && !e->empty() && (*e)[0].is_number_integer()) {
    c.eos_token_id = (*e)[0].get<int64_t>();
  } else {
    MX_ASSIGN_OR_RETURN(c.eos_token_id, json_int_or(j, "eos_token_id", -1, what));
  }

  c.rotary_dim = c.head_dim;
  c.layer_kinds.assign(static_cast<size_t>(c.num_layers), LayerKind::kFullAttention);
  if (c.is_hybrid()) MX_RETURN_IF_ERROR(parse_qwen3_5_fields(j, what, &c));
  if (c.has_moe()) {
    MX_ASSIGN_OR_RETURN(c.num_experts, json_int(j, "num_experts", what));
    MX_ASSIGN_OR_RETURN(c.num_experts_per_tok, json_int(j, "num_experts_per_tok", what));
    MX_ASSIGN_OR_RETURN(c.moe_intermediate_size, json_int(j, "moe_intermediate_size", what));
    MX_RETURN_IF_ERROR(positive(what, "num_experts", c.num_experts));
    MX_RETURN_IF_ERROR(positive(what, "num_experts_per_tok", c.num_experts_per_tok));
    MX_RETURN_IF_ERROR(positive(what, "moe_intermediate_size", c.moe_intermediate_size));
    if (c.num_experts_per_tok > c.num_experts) {
      return invalid_argument(what + ": num_experts_per_tok exceeds num_experts");
    }
    MX_ASSIGN_OR_RETURN(c.norm_topk_prob, json_bool_or(j, "norm_topk_prob", false, what));
    MX_ASSIGN_OR_RETURN(c.decoder_sparse_step, json_int_or(j, "decoder_sparse_step", 1, what));
    MX_RETURN_IF_ERROR(positive(what, "decoder_sparse_step", c.decoder_sparse_step));
    MX_ASSIGN_OR_RETURN(c.mlp_only_layers, json_int_list_or(j, "mlp_only_layers", what));
    for (int64_t i = 0; i < c.num_layers; ++i) {
      if (!c.is_moe_layer(i) && c.intermediate_size <= 0) {
        return invalid_argument(what + ": layer " + std::to_string(i) +
                                " is dense but intermediate_size is not given");
      }
    }
    // The Qwen3.5 router always renormalizes its top-k; Qwen3-Next's says so in its config.
    if (c.arch == Arch::kQwen3_5Moe) c.norm_topk_prob = true;
    if (c.is_hybrid()) {
      MX_ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                          json_int_or(j, "shared_expert_intermediate_size", 0, what));
    }
  }
  // A text-only checkpoint may carry the vision_config of the model it was cut from (ids past
  // its vocabulary, no tower weights): its text still runs, and the reason is kept for
  // whoever asks for the tower.
  if (Status v = parse_vision_config(top, what, &c); !v.is_ok()) {
    c.vision = VisionConfig{};
    c.vision.unusable = v.to_string();
  }
  MX_RETURN_IF_ERROR(validate_model_config(c, what));
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec)) {
    return not_found(model_dir + ": model directory does not exist");
  }
  MX_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_model_config(text, path);
}

}  // namespace mx
