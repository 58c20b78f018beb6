// Writes an offline-quantized checkpoint in the msmodelslim layout: quant_model_description.json
// (a type string per saved tensor plus globals), quant_model_weights.safetensors (sharded with an
// index above a size), and the Hugging Face files with any quantization_config removed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "formats/mx_block.h"
#include "quant/scheme.h"

namespace mx {

struct ExportOptions {
  Scheme scheme = Scheme::kW8A8Mxfp8;
  ScaleRule rule = ScaleRule::kFloor;
  // Tensors whose name contains any of these stay FLOAT, besides embeddings, lm_head, norms
  // and the router gate, which always do.
  std::vector<std::string> keep_float;
  // msmodelslim may quantize the MoE router gate too; loaders must then dequantize it.
  bool quantize_router_gate = false;
  // lm_head in the same scheme as the other linear layers.
  bool quantize_lm_head = false;
  uint64_t max_shard_bytes = 4ull << 30;
  // Splits each weight's quantization across threads (null: one thread).
  ThreadPool* pool = nullptr;
  std::function<void(int64_t done, int64_t total)> progress;
};

struct ExportSummary {
  int64_t quantized = 0, kept_float = 0, shards = 0;
  uint64_t bytes = 0;
};

Result<ExportSummary> export_msmodelslim(const std::string& src_dir, const std::string& out_dir,
                                         const ExportOptions& opt);

}  // namespace mx
