// Quantization methods: how a module's stored weights become a Linear or an ExpertBank, one
// method per kernel family (MX, ggml blocks, BF16), in vLLM's shape. A method says whether it
// takes a module's weights under the load plan; creating the module processes the weights
// after loading (quantized online, repacked without loss, or packed into the layout of the
// kernel table that runs them, which the module names in kernel_table()); the module then
// applies them (Linear::forward, ExpertBank::run). The loader asks the methods in order and
// branches on no format itself.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loader/weight_source.h"
#include "quant/linear.h"

namespace mx {

class ThreadPool;

// What a load asks of weights that a checkpoint did not store in an MX scheme.
struct QuantPlan {
  // Online quantization of float and GGUF weights (--quantization).
  std::optional<Scheme> online;
  // GGUF weights dequantized to BF16 at load (--gguf-dequant bf16) instead of kept in blocks.
  bool gguf_dequant_bf16 = false;
  // How GGUF blocks kept as stored meet activations (--gguf-activations).
  GgmlActivations gguf_activations = GgmlActivations::kNative;
  ScaleRule rule = ScaleRule::kFloor;
  // Online quantization rotates each weight row by blocks of this many first, and the
  // activations meeting it likewise (--rotation; 0: none).
  int64_t rotation = 0;
  ThreadPool* pool = nullptr;  // splits online quantization across threads (may be null)
};

// One expert bank's stored weights, expert by expert: gate and up [I, H], down [H, I].
struct ExpertWeights {
  std::vector<StoredWeight> gate, up, down;
};

// A token embedding table: BF16 [vocab, hidden], or rows U8 [vocab, row_bytes] of a ggml
// type, dequantized a row at a time.
struct EmbeddingTable {
  Tensor table;
  std::optional<GgmlType> ggml;
};

class QuantMethod {
 public:
  virtual ~QuantMethod() = default;
  virtual std::string_view name() const = 0;
  // Whether this method runs a module stored as `parts` (a packed module's shards, or every
  // weight of an expert bank). `keep_float`: online quantization passes the module by (router
  // gate, lm_head, embeddings).
  virtual bool takes(const std::vector<StoredWeight>& parts, const QuantPlan& plan,
                     bool keep_float) const = 0;
  // One matmul over `parts` stacked along the output. Checkpoint pages that the module copied
  // into memory of its own are released.
  virtual Result<std::unique_ptr<Linear>> create_linear(const std::vector<StoredWeight>& parts,
                                                        const std::string& name,
                                                        const QuantPlan& plan) const = 0;
  // The bank of `prefix` ("model.layers.3.mlp"), built expert by expert where the method
  // copies the weights, so a layer never holds its source and its copy whole at once.
  virtual Result<std::unique_ptr<ExpertBank>> create_expert_bank(const ExpertWeights& w,
                                                                 const std::string& prefix,
                                                                 const QuantPlan& plan) const = 0;
  virtual Result<EmbeddingTable> create_embedding(const StoredWeight& w,
                                                  const std::string& name) const = 0;
};

// Every method in the order a load asks them: MX (weights stored in a scheme, online
// quantization, GGUF MXFP4 blocks), ggml (GGUF blocks as stored, F32/F16 tensors), BF16
// (whatever is left, which it takes always).
const std::vector<const QuantMethod*>& quant_methods();
// The first method that takes `parts`.
const QuantMethod& quant_method_for(const std::vector<StoredWeight>& parts, const QuantPlan& plan,
                                    bool keep_float);

}  // namespace mx
