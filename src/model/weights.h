// Where a module's weights come from: BF16 tensors as stored, quantized online to a scheme,
// or an offline msmodelslim checkpoint whose description gives each tensor's type. Layers ask
// for linears and expert banks by name; nothing above this file branches on formats.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loader/checkpoint.h"
#include "loader/quant_description.h"
#include "quant/linear.h"

namespace mx {

class WeightLoader {
 public:
  // `pool` (may be null) splits online quantization across threads.
  WeightLoader(const CheckpointFiles& ck, const QuantDescription* offline,
               std::optional<Scheme> online, ScaleRule rule, ThreadPool* pool = nullptr)
      : ck_(ck), offline_(offline), online_(online), rule_(rule), pool_(pool) {}

  // A plain tensor with a checked shape (norms, embeddings).
  Result<Tensor> get(const std::string& name, const Shape& shape) const;
  bool has(const std::string& name) const { return ck_.find(name) != nullptr; }

  // One matmul over modules stacked along the output (a packed module such as qkv_proj):
  // module i has out_dims[i] rows of width `in`. `keep_float` keeps BF16 under online
  // quantization (router gate, lm_head). Offline, every shard must carry the same type.
  Result<std::unique_ptr<Linear>> linear(const std::vector<std::string>& modules,
                                         const std::vector<int64_t>& out_dims, int64_t in,
                                         const std::string& packed_name,
                                         bool keep_float = false) const;
  // An FP32 view of a possibly quantized weight (a quantized router gate is dequantized with
  // its scales, never read without them).
  Result<Tensor> float_weight(const std::string& module, const Shape& shape) const;
  // The expert bank of `prefix` ("model.layers.3.mlp"): experts.E.{gate,up,down}_proj.
  Result<std::unique_ptr<ExpertBank>> experts(const std::string& prefix, int64_t num_experts,
                                              int64_t inter, int64_t hidden) const;

 private:
  // The scheme a module is stored in (offline) or will be quantized to (online).
  Result<Scheme> scheme_of(const std::string& module, bool keep_float) const;
  Result<MxWeights> load_offline_mx(const std::string& module, Scheme s, int64_t n,
                                    int64_t k) const;
  Result<MxWeights> mx_weights(const std::string& module, Scheme s, int64_t n, int64_t k) const;

  const CheckpointFiles& ck_;
  const QuantDescription* offline_;
  std::optional<Scheme> online_;
  ScaleRule rule_;
  ThreadPool* pool_;
};

}  // namespace mx
