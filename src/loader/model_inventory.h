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
  std::optional<QuantDescription> quant;  // set for an offline (msmodelslim) checkpoint
  // Offline only: module (tensor name without ".weight") -> type, for weight tensors.
  std::map<std::string, QuantType> module_types;
};

Result<ModelInventory> inspect_model_dir(const std::string& dir);

}  // namespace mx
