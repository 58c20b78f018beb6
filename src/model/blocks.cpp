#include "model/blocks.h"

namespace mx {

Result<Tensor> WeightSource::get(const std::string& name, const Shape& shape) const {
  auto t = ck_.tensor(name);
  if (!t.is_ok()) return not_found("checkpoint is missing tensor '" + name + "'");
  if (t->shape() != shape) {
    return invalid_argument("tensor '" + name + "' has shape " + shape_to_string(t->shape()) +
                            " but the config implies " + shape_to_string(shape));
  }
  return t;
}

LayerBuilder layer_builder_for(Arch arch) {
  // The explicit list of architectures; config parsing rejects anything else first.
  switch (arch) {
    case Arch::kQwen3:
      return build_qwen3_layer;
    case Arch::kQwen3Moe:
      return build_qwen3_moe_layer;
  }
  return nullptr;
}

Status load_norms(const WeightSource& w, const ModelConfig& c, const std::string& prefix,
                  DecoderLayer* out) {
  MX_ASSIGN_OR_RETURN(out->input_norm, w.get(prefix + ".input_layernorm.weight", {c.hidden_size}));
  MX_ASSIGN_OR_RETURN(out->post_norm,
                      w.get(prefix + ".post_attention_layernorm.weight", {c.hidden_size}));
  for (const Tensor* t : {&out->input_norm, &out->post_norm}) {
    if (t->dtype() != DType::kBF16) {
      return unimplemented(prefix + ": norm weights must be BF16 (got " + t->describe() + ")");
    }
  }
  return Status::ok();
}

Status load_attention(const WeightSource& w, const ModelConfig& c, const std::string& prefix,
                      AttentionBlock* out) {
  const int64_t h = c.hidden_size, d = c.head_dim;
  MX_ASSIGN_OR_RETURN(Tensor q, w.get(prefix + ".q_proj.weight", {c.num_heads * d, h}));
  MX_ASSIGN_OR_RETURN(Tensor k, w.get(prefix + ".k_proj.weight", {c.num_kv_heads * d, h}));
  MX_ASSIGN_OR_RETURN(Tensor v, w.get(prefix + ".v_proj.weight", {c.num_kv_heads * d, h}));
  MX_ASSIGN_OR_RETURN(Tensor o, w.get(prefix + ".o_proj.weight", {h, c.num_heads * d}));
  MX_ASSIGN_OR_RETURN(out->q_norm, w.get(prefix + ".q_norm.weight", {d}));
  MX_ASSIGN_OR_RETURN(out->k_norm, w.get(prefix + ".k_norm.weight", {d}));
  if (c.attention_bias) return unimplemented(prefix + ": attention_bias is not supported");
  MX_ASSIGN_OR_RETURN(out->qkv, make_bf16_linear({q, k, v}, prefix + ".qkv_proj"));
  MX_ASSIGN_OR_RETURN(out->o, make_bf16_linear({o}, prefix + ".o_proj"));
  return Status::ok();
}

Status load_dense_mlp(const WeightSource& w, const ModelConfig& c, const std::string& prefix,
                      int64_t width, DenseMlp* out) {
  const int64_t h = c.hidden_size;
  MX_ASSIGN_OR_RETURN(Tensor g, w.get(prefix + ".gate_proj.weight", {width, h}));
  MX_ASSIGN_OR_RETURN(Tensor u, w.get(prefix + ".up_proj.weight", {width, h}));
  MX_ASSIGN_OR_RETURN(Tensor dn, w.get(prefix + ".down_proj.weight", {h, width}));
  MX_ASSIGN_OR_RETURN(out->gate_up, make_bf16_linear({g, u}, prefix + ".gate_up_proj"));
  MX_ASSIGN_OR_RETURN(out->down, make_bf16_linear({dn}, prefix + ".down_proj"));
  return Status::ok();
}

Status load_moe(const WeightSource& w, const ModelConfig& c, const std::string& prefix,
                MoeBlock* out) {
  const int64_t h = c.hidden_size, i = c.moe_intermediate_size;
  MX_ASSIGN_OR_RETURN(Tensor gate, w.get(prefix + ".gate.weight", {c.num_experts, h}));
  MX_ASSIGN_OR_RETURN(out->router, make_bf16_linear({gate}, prefix + ".gate"));
  std::vector<Tensor> g, u, d;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const std::string ep = prefix + ".experts." + std::to_string(e);
    MX_ASSIGN_OR_RETURN(Tensor ge, w.get(ep + ".gate_proj.weight", {i, h}));
    MX_ASSIGN_OR_RETURN(Tensor ue, w.get(ep + ".up_proj.weight", {i, h}));
    MX_ASSIGN_OR_RETURN(Tensor de, w.get(ep + ".down_proj.weight", {h, i}));
    g.push_back(std::move(ge));
    u.push_back(std::move(ue));
    d.push_back(std::move(de));
  }
  MX_ASSIGN_OR_RETURN(out->experts, make_bf16_expert_bank(g, u, d, prefix));
  out->top_k = c.num_experts_per_tok;
  out->norm_topk_prob = c.norm_topk_prob;
  return Status::ok();
}

Status load_embeddings_and_head(const WeightSource& w, const ModelConfig& c, DecoderModel* m) {
  MX_ASSIGN_OR_RETURN(Tensor embed,
                      w.get("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}));
  MX_ASSIGN_OR_RETURN(Tensor e16, stack_rows_bf16({embed}, "model.embed_tokens"));
  m->embed = std::move(e16);
  MX_ASSIGN_OR_RETURN(m->final_norm, w.get("model.norm.weight", {c.hidden_size}));
  if (m->final_norm.dtype() != DType::kBF16) {
    return unimplemented("model.norm.weight must be BF16 (got " + m->final_norm.describe() + ")");
  }
  // A tied checkpoint may still ship lm_head.weight; without one the embedding serves.
  if (!c.tie_word_embeddings || w.has("lm_head.weight")) {
    MX_ASSIGN_OR_RETURN(Tensor head, w.get("lm_head.weight", {c.vocab_size, c.hidden_size}));
    MX_ASSIGN_OR_RETURN(m->lm_head, make_bf16_linear({head}, "lm_head"));
  } else {
    MX_ASSIGN_OR_RETURN(m->lm_head, make_bf16_linear({m->embed}, "lm_head"));
  }
  return Status::ok();
}

}  // namespace mx
