// Building blocks shared by the architecture files: reading named tensors with checked
// shapes, and loading attention, dense MLP and MoE weights.
#pragma once

#include <string>

#include "loader/checkpoint.h"
#include "model/model.h"

namespace mx {

class WeightSource {
 public:
  explicit WeightSource(const CheckpointFiles& ck) : ck_(ck) {}
  // The tensor, which must have `shape`; errors name the tensor.
  Result<Tensor> get(const std::string& name, const Shape& shape) const;
  bool has(const std::string& name) const { return ck_.find(name) != nullptr; }

 private:
  const CheckpointFiles& ck_;
};

using ProgressFn = void (*)(int64_t done, int64_t total);

Status load_attention(const WeightSource& w, const ModelConfig& c, const std::string& prefix,
                      AttentionBlock* out);
Status load_dense_mlp(const WeightSource& w, const ModelConfig& c, const std::string& prefix,
                      int64_t width, DenseMlp* out);
Status load_moe(const WeightSource& w, const ModelConfig& c, const std::string& prefix,
                MoeBlock* out);
// Norms, embedding, final norm and lm_head (tied or not).
Status load_norms(const WeightSource& w, const ModelConfig& c, const std::string& prefix,
                  DecoderLayer* out);
Status load_embeddings_and_head(const WeightSource& w, const ModelConfig& c, DecoderModel* m);

// Architecture builders (one file each) and the registry.
using LayerBuilder = Status (*)(const WeightSource& w, const ModelConfig& c, int64_t layer,
                                DecoderLayer* out);
Status build_qwen3_layer(const WeightSource& w, const ModelConfig& c, int64_t layer,
                         DecoderLayer* out);
Status build_qwen3_moe_layer(const WeightSource& w, const ModelConfig& c, int64_t layer,
                             DecoderLayer* out);
LayerBuilder layer_builder_for(Arch arch);

}  // namespace mx
