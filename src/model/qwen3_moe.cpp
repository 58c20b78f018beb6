// Qwen3MoeForCausalLM: Qwen3 attention; layer i is sparse iff it is not in mlp_only_layers and
// (i + 1) % decoder_sparse_step == 0 (ModelConfig::is_moe_layer), else a dense MLP of
// intermediate_size. The router takes an FP32 softmax over all experts, then top-k,
// renormalized iff norm_topk_prob.
#include "model/blocks.h"

namespace mx {

Status build_qwen3_moe_layer(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                             DecoderLayer* out) {
  const std::string p = c.weight_prefix + "layers." + std::to_string(layer);
  MX_RETURN_IF_ERROR(load_norms(w, c, p, out));
  MX_RETURN_IF_ERROR(load_attention(w, c, p + ".self_attn", &out->attn));
  if (c.is_moe_layer(layer)) {
    out->moe = std::make_unique<MoeBlock>();
    return load_moe(w, c, p + ".mlp", out->moe.get());
  }
  out->mlp = std::make_unique<DenseMlp>();
  return load_dense_mlp(w, c, p + ".mlp", c.intermediate_size, out->mlp.get());
}

void qwen3_moe_layer_forward(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                             float* h) {
  attention_sublayer(layer, li, ctx, x, h);
  if (layer.moe) {
    moe_ffn_sublayer(layer, li, ctx, x, h);
  } else {
    dense_ffn_sublayer(layer, ctx, x, h);
  }
}

}  // namespace mx
