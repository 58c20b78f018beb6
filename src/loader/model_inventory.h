// What a model directory holds, without loading weights: config, tensors, bytes per dtype,
// parameter count and the quantization found. Backs `mxserve inspect`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "loader/model_config.h"
#include "loader/quant_description.h"

namespace mx {

struct ModelInventory {
  std::string dir;
  ModelConfig config;
  size_t num_tensors = 0;
  size_t num_files = 0;
  // Logical weight elements: packed FP4 bytes count twice, scale tensors not at all.
  int64_t parameters = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  uint64_t scale_bytes = 0;
  // Every tensor's bytes, and those of routed experts (what expert parallelism splits).
  uint64_t total_bytes = 0, routed_expert_bytes = 0;
  // Those of the tensors tensor parallelism splits (projections, experts, lm_head, DeltaNet's
  // conv and gates); the rest (embeddings, norms, routers) every rank holds whole.
  uint64_t tp_split_bytes = 0;
  std::optional<QuantDescription> quant;  // set for an offline (msmodelslim) checkpoint
  // Offline only: module (tensor name without ".weight") -> type, for weight tensors.
  std::map<std::string, QuantType> module_types;
  // GGUF only: the ggml type of every tensor, counted and summed per type.
  struct GgufFacts {
    uint32_t version = 0;
    int64_t quantization_version = -1;                          // general.quantization_version
    int64_t file_type = -1;                                     // general.file_type (llama_ftype)
    std::map<std::string, std::pair<int64_t, uint64_t>> types;  // name -> (tensors, bytes)
    std::string tokenizer;
  };
  std::optional<GgufFacts> gguf;
};

// `path`: a checkpoint of any format (loader/checkpoint_format.h).
Result<ModelInventory> inspect_model_dir(const std::string& path);

// Each format's inventory, for its entry in the format registry.
Result<ModelInventory> inspect_gguf_checkpoint(const std::string& path);
Result<ModelInventory> inspect_safetensors_checkpoint(const std::string& dir);
Result<ModelInventory> inspect_msmodelslim_checkpoint(const std::string& dir);

}  // namespace mx
