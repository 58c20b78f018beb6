// Building blocks shared by the architecture files: reading named tensors with checked
// shapes, and loading attention, dense MLP and MoE weights.
#pragma once

#include <string>

#include "model/model.h"
#include "model/weights.h"

namespace mx {

Status load_attention(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                      AttentionBlock* out);
Status load_dense_mlp(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                      int64_t width, DenseMlp* out);
Status load_moe(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                MoeBlock* out);
// Norms, embedding, final norm and lm_head (tied or not).
Status load_norms(const WeightLoader& w, const ModelConfig& c, const std::string& prefix,
                  DecoderLayer* out);
// `head_scheme`: lm_head's online scheme (nullopt keeps it in floating point).
Status load_embeddings_and_head(const WeightLoader& w, const ModelConfig& c,
                                std::optional<Scheme> head_scheme, ScaleRule rule, DecoderModel* m);

// Architecture builders (one file each) and the registry.
using LayerBuilder = Status (*)(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                                DecoderLayer* out);
Status build_qwen3_layer(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                         DecoderLayer* out);
Status build_qwen3_moe_layer(const WeightLoader& w, const ModelConfig& c, int64_t layer,
                             DecoderLayer* out);
LayerBuilder layer_builder_for(Arch arch);

}  // namespace mx
