// Qwen3ForCausalLM: every layer is attention (with per-head q/k RMSNorm) plus a dense SwiGLU
// MLP of intermediate_size.
#include "model/blocks.h"

namespace mx {

Status build_qwen3_layer(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                         DecoderLayer* out) {
  const std::string p = c.weight_prefix + "layers." + std::to_string(layer);
  MX_RETURN_IF_ERROR(load_norms(w, c, p, out));
  MX_RETURN_IF_ERROR(load_attention(w, c, p + ".self_attn", &out->attn));
  out->mlp = std::make_unique<DenseMlp>();
  return load_dense_mlp(w, c, p + ".mlp", c.intermediate_size, out->mlp.get());
}

void qwen3_layer_forward(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                         float* h) {
  attention_sublayer(layer, li, ctx, x, h);
  dense_ffn_sublayer(layer, ctx, x, h);
}

}  // namespace mx
