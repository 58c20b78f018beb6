// Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration, text only: the
// language model under model.language_model.*; Qwen3NextForCausalLM, the same layers under
// model.*, with DeltaNet's projections stored fused and interleaved (deltanet_block.cpp). Each
// layer mixes tokens with gated DeltaNet (linear_attention) or gated full attention with partial
// rotary (full_attention), as ModelConfig::layer_kinds says, then a dense MLP or a MoE with a
// sigmoid-gated shared expert. Norms are zero-centred, (1 + w), applied at load.
#include "model/blocks.h"

namespace mx {

// DeltaNet's projections that run as one matmul each (SGLang's and vLLM-Ascend's names).
const PackedModules kQwen3_5PackedModules = {
    {"in_proj_qkvz", {"in_proj_qkv", "in_proj_z"}},
    {"in_proj_ba", {"in_proj_b", "in_proj_a"}},
};

Status build_qwen3_5_layer(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                           DecoderLayer* out) {
  const std::string p = c.weight_prefix + "layers." + std::to_string(layer);
  MX_RETURN_IF_ERROR(load_norms(w, c, p, out));
  if (c.is_linear_attention(layer)) {
    out->deltanet = std::make_unique<DeltaNetBlock>();
    MX_RETURN_IF_ERROR(load_deltanet(w, c, p + ".linear_attn", out->deltanet.get()));
  } else {
    MX_RETURN_IF_ERROR(load_attention(w, c, p + ".self_attn", &out->attn));
  }
  if (c.is_moe_layer(layer)) {
    out->moe = std::make_unique<MoeBlock>();
    return load_moe(w, c, p + ".mlp", out->moe.get());
  }
  out->mlp = std::make_unique<DenseMlp>();
  return load_dense_mlp(w, c, p + ".mlp", c.intermediate_size, out->mlp.get());
}

void qwen3_5_layer_forward(const DecoderLayer& layer, int64_t li, ForwardContext& ctx, float* x,
                           float* h) {
  if (layer.deltanet) {
    deltanet_sublayer(layer, li, ctx, x, h);
  } else {
    attention_sublayer(layer, li, ctx, x, h);
  }
  if (layer.moe) {
    moe_ffn_sublayer(layer, li, ctx, x, h);
  } else {
    dense_ffn_sublayer(layer, ctx, x, h);
  }
}

}  // namespace mx
