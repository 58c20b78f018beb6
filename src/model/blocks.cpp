#include "model/blocks.h"

#include <cstring>

#include "kernels/ops.h"

namespace mx {

void dense_mlp_forward(const DenseMlp& mlp, ForwardContext& ctx, float* h) {
  PhaseTimer t_mlp(ctx.profile, Phase::kDenseMlp);
  dense_mlp_apply(mlp, ctx, h);
}

void dense_mlp_apply(const DenseMlp& mlp, ForwardContext& ctx, float* h) {
  const int64_t n = ctx.rows, width = mlp.down->in_features();
  float* tmp = ctx.exec.workspace().floats(kWsMlp, n * 2 * width);
  mlp.gate_up->forward(h, n, tmp, ctx.exec);
  for (int64_t t = 0; t < n; ++t) {
    swiglu(tmp + t * 2 * width, tmp + t * 2 * width + width, width, tmp + t * 2 * width);
    // Compact the activations to [n, width] rows (in place, forward order is safe).
    std::memmove(tmp + t * width, tmp + t * 2 * width, static_cast<size_t>(width) * sizeof(float));
  }
  mlp.down->forward(tmp, n, h, ctx.exec);
}

namespace {

void norm_rows(const Tensor& w, ForwardContext& ctx, const float* x, float* h) {
  const int64_t n = ctx.rows, hid = ctx.config.hidden_size;
  PhaseTimer t(ctx.profile, Phase::kNorms);
  const auto rows = [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) {
      rms_norm(x + r * hid, w.data_as<float>(), hid, ctx.config.rms_norm_eps, h + r * hid);
    }
  };
  for_ranges(ctx.exec.pool(), n, rows, kParallelRows);
}

}  // namespace

void add_rows(ForwardContext& ctx, const float* h, float* x) {
  const int64_t hid = ctx.config.hidden_size;
  const auto rows = [&](int64_t b, int64_t e, int) {
    for (int64_t i = b * hid; i < e * hid; ++i) x[i] += h[i];
  };
  for_ranges(ctx.exec.pool(), ctx.rows, rows, kParallelRows);
}

void tp_all_reduce(ForwardContext& ctx, float* rows) {
  if (ctx.tp == nullptr) return;
  PhaseTimer t(ctx.profile, Phase::kTpAllReduce);
  const Status st = ctx.tp->all_reduce_sum(rows, ctx.rows * ctx.config.hidden_size);
  // A rank that cannot sum leaves its peers waiting in the collective: end the job.
  if (!st.is_ok()) ctx.tp->abort("the tensor-parallel all-reduce failed: " + st.to_string());
}

void attention_sublayer(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                        float* h) {
  norm_rows(layer.input_norm, ctx, x, h);
  attention_forward(layer.attn, li, ctx, h);
  tp_all_reduce(ctx, h);
  PhaseTimer t(ctx.profile, Phase::kNorms);
  add_rows(ctx, h, x);
}

void deltanet_sublayer(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                       float* h) {
  norm_rows(layer.input_norm, ctx, x, h);
  deltanet_forward(*layer.deltanet, li, ctx, h);
  tp_all_reduce(ctx, h);
  PhaseTimer t(ctx.profile, Phase::kNorms);
  add_rows(ctx, h, x);
}

void dense_ffn_sublayer(const DecoderLayer& layer, ForwardContext& ctx, float* x, float* h) {
  norm_rows(layer.post_norm, ctx, x, h);
  dense_mlp_forward(*layer.mlp, ctx, h);
  tp_all_reduce(ctx, h);
  add_rows(ctx, h, x);
}

void moe_ffn_sublayer(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                      float* h) {
  norm_rows(layer.post_norm, ctx, x, h);
  moe_forward(*layer.moe, li, ctx, h, x);
}

Result<Tensor> load_norm(const WeightLoader& w, const ModelConfig& c, const std::string& name,
                         int64_t n) {
  MX_ASSIGN_OR_RETURN(Tensor t, w.norm(name, n));
  // Zero-centred norms store w - 1: the (1 + w) is applied once here, in FP32 as the
  // reference adds it, so the norm kernel is the same for every model.
  if (c.zero_centered_norms) {
    float* p = t.mutable_data_as<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = 1.0f + p[i];
  }
  return t;
}

Status load_norms(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                  DecoderLayer* out) {
  MX_ASSIGN_OR_RETURN(out->input_norm,
                      load_norm(w, c, prefix + ".input_layernorm.weight", c.hidden_size));
  MX_ASSIGN_OR_RETURN(out->post_norm,
                      load_norm(w, c, prefix + ".post_attention_layernorm.weight", c.hidden_size));
  return Status::ok();
}

Status load_attention(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                      AttentionBlock* out) {
  const int64_t h = c.hidden_size, d = c.head_dim;
  if (c.attention_bias) return unimplemented(prefix + ": attention_bias is not supported");
  MX_ASSIGN_OR_RETURN(out->q_norm, load_norm(w, c, prefix + ".q_norm.weight", d));
  MX_ASSIGN_OR_RETURN(out->k_norm, load_norm(w, c, prefix + ".k_norm.weight", d));
  out->output_gate = c.attn_output_gate;
  // With an output gate each query head's rows are [query | gate].
  const int64_t q_per = (c.attn_output_gate ? 2 : 1) * d;
  const int64_t q_rows = q_per * c.num_heads, kv_rows = c.num_kv_heads * d;
  if (!w.tp().on()) {
    MX_ASSIGN_OR_RETURN(out->qkv, w.packed(prefix, "qkv_proj", {q_rows, kv_rows, kv_rows}, h));
    MX_ASSIGN_OR_RETURN(out->o,
                        w.linear({prefix + ".o_proj"}, {h}, c.num_heads * d, prefix + ".o_proj"));
    return Status::ok();
  }
  const Ranges q = {w.tp().heads(c.num_heads)}, kv = {w.tp().kv_heads(c.num_kv_heads)};
  MX_ASSIGN_OR_RETURN(
      out->qkv,
      w.shard(w.packed_modules(prefix, "qkv_proj", 3), {q_rows, kv_rows, kv_rows}, h,
              {scaled(q, q_per), scaled(kv, d), scaled(kv, d)}, {}, prefix + ".qkv_proj"));
  std::vector<Ranges> o_cols;
  for (int r = 0; r < w.tp().size; ++r) {
    o_cols.push_back(scaled({TpShard{r, w.tp().size}.heads(c.num_heads)}, d));
  }
  MX_ASSIGN_OR_RETURN(
      out->o, w.row_parallel(prefix + ".o_proj", h, c.num_heads * d, o_cols, prefix + ".o_proj"));
  return Status::ok();
}

Status load_dense_mlp(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                      int64_t width, DenseMlp* out) {
  const int64_t h = c.hidden_size;
  const std::string down = prefix + ".down_proj";
  if (!w.tp().on()) {
    MX_ASSIGN_OR_RETURN(out->gate_up, w.packed(prefix, "gate_up_proj", {width, width}, h));
    MX_ASSIGN_OR_RETURN(out->down, w.linear({down}, {h}, width, down));
    return Status::ok();
  }
  // Split where down's blocks begin; a width with fewer of them than ranks splits at 32 and
  // down gathers its input instead (WeightLoader::row_parallel).
  MX_ASSIGN_OR_RETURN(int64_t unit, w.column_unit(down, h, width));
  const int size = w.tp().size;
  if (!splits_at(width, unit, size)) unit = 32;
  MX_RETURN_IF_ERROR(check_width_split(prefix + " intermediate width", width, unit, size));
  std::vector<Ranges> cols;
  for (int r = 0; r < size; ++r) cols.push_back({TpShard{r, size}.width(width, unit)});
  const Ranges& mine = cols[static_cast<size_t>(w.tp().rank)];
  MX_ASSIGN_OR_RETURN(out->gate_up,
                      w.shard(w.packed_modules(prefix, "gate_up_proj", 2), {width, width}, h,
                              {mine, mine}, {}, prefix + ".gate_up_proj"));
  MX_ASSIGN_OR_RETURN(out->down, w.row_parallel(down, h, width, cols, down));
  return Status::ok();
}

Status load_moe(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                MoeBlock* out) {
  // The router stays in FP32/BF16 compute; a quantized gate is dequantized with its scales.
  MX_ASSIGN_OR_RETURN(out->router, w.router(prefix + ".gate", c.num_experts, c.hidden_size));
  MX_ASSIGN_OR_RETURN(out->experts, w.experts(prefix, c.num_experts, c.moe_intermediate_size,
                                              c.hidden_size, &out->first_expert));
  out->num_experts = c.num_experts;
  out->top_k = c.num_experts_per_tok;
  out->norm_topk_prob = c.norm_topk_prob;
  if (c.shared_expert_intermediate_size > 0) {
    out->shared = std::make_unique<DenseMlp>();
    MX_RETURN_IF_ERROR(load_dense_mlp(w, c, prefix + ".shared_expert",
                                      c.shared_expert_intermediate_size, out->shared.get()));
    // The gate is one row: kept as stored, like the router.
    MX_ASSIGN_OR_RETURN(out->shared_gate,
                        w.linear({prefix + ".shared_expert_gate"}, {1}, c.hidden_size,
                                 prefix + ".shared_expert_gate", /*keep_float=*/true));
  }
  return Status::ok();
}

Status load_embeddings_and_head(const WeightLoader& w, const ModelConfig& c,
                                std::optional<Scheme> head_scheme, ScaleRule rule,
                                DecoderModel* m) {
  const std::string embed = c.weight_prefix + "embed_tokens";
  MX_RETURN_IF_ERROR(w.embedding(embed, c.vocab_size, c.hidden_size, &m->embed));
  MX_ASSIGN_OR_RETURN(m->final_norm,
                      load_norm(w, c, c.weight_prefix + "norm.weight", c.hidden_size));
  const bool keep_float = !head_scheme;
  const int64_t v0 = m->head_begin, v1 = m->head_end;
  // A tied head's rows of the embedding (the whole of a vocabulary-parallel table's share).
  auto head_rows = [m, v0, v1] {
    const int64_t first = m->embed.first;
    return m->embed.table.slice(0, v0 - first, v1 - first);
  };
  // A tied checkpoint may still ship lm_head.weight; without one the embedding serves.
  if (!c.tie_word_embeddings || w.has("lm_head.weight")) {
    MX_ASSIGN_OR_RETURN(m->lm_head, w.linear_rows("lm_head", c.vocab_size, c.hidden_size, v0, v1,
                                                  "lm_head", keep_float));
  } else if (m->embed.ggml) {
    // Tied GGUF heads run on the embedding's blocks, like any other GGUF linear.
    MX_ASSIGN_OR_RETURN(m->lm_head, w.linear_rows(embed, c.vocab_size, c.hidden_size, v0, v1,
                                                  "lm_head", keep_float));
  } else if (head_scheme && *head_scheme != Scheme::kBf16) {
    MX_ASSIGN_OR_RETURN(
        MxWeights q, quantize_weight(head_rows(), *head_scheme, rule, "lm_head", m->pool_.get()));
    m->lm_head = make_mx_linear(std::move(q), rule);
  } else {
    MX_ASSIGN_OR_RETURN(m->lm_head, make_bf16_linear({head_rows()}, "lm_head"));
  }
  return Status::ok();
}

}  // namespace mx
