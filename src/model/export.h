// Writes an offline-quantized checkpoint in the msmodelslim layout: quant_model_description.json
// (a type string per saved tensor plus globals), quant_model_weights.safetensors (sharded with an
// index above a size), and the Hugging Face files with any quantization_config removed.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
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
  // Mixes, as msmodelslim's recipes and llama.cpp's MXFP4_MOE make them: a weight whose name
  // contains a pattern takes that scheme instead of `scheme` (the first pattern that matches
  // wins; keep_float wins over all). A pattern matching lm_head quantizes it.
  std::vector<std::pair<std::string, Scheme>> module_schemes;
  // msmodelslim may quantize the MoE router gate too; loaders must then dequantize it.
  bool quantize_router_gate = false;
  // lm_head in the same scheme as the other linear layers.
  bool quantize_lm_head = false;
  // Block Hadamard rotation of every quantized weight along K (32, 128; 0: none), recorded in
  // the description.
  int64_t rotation = 0;
  // Weights quantized already (GPTQ, model/calibrate.h), by tensor name, written as given
  // (each in the scheme this export chooses for it); every other one is rounded to nearest.
  const std::map<std::string, MxWeights>* calibrated = nullptr;
  uint64_t max_shard_bytes = 4ull << 30;
  // Write into an output directory that already holds files (the previous export's weights
  // and index are removed first, so no stale shard is left to be loaded).
  bool overwrite = false;
  // Splits each weight's quantization across threads (null: one thread).
  ThreadPool* pool = nullptr;
  std::function<void(int64_t done, int64_t total)> progress;
};

struct ExportSummary {
  int64_t quantized = 0, kept_float = 0, shards = 0;
  int64_t calibrated = 0;  // of `quantized`, those given in ExportOptions::calibrated
  uint64_t bytes = 0;
  // keep_float patterns that no tensor name contains (a typo keeps nothing FLOAT); each is
  // also logged as a warning before the export starts.
  std::vector<std::string> unmatched_keep_float;
  // module_schemes patterns that no tensor name contains, warned the same way.
  std::vector<std::string> unmatched_module_schemes;
};

// The shard size limits export_msmodelslim accepts: below, one tensor per file; above, no
// filesystem or loader would take it.
inline constexpr uint64_t kMinShardBytes = 1ull << 20;
inline constexpr uint64_t kMaxShardBytes = 1ull << 40;

// The scheme export_msmodelslim writes the tensor `name` of rank `rank` in; nullopt: FLOAT.
std::optional<Scheme> export_scheme(const std::string& name, int64_t rank,
                                    const ExportOptions& opt);

// Refuses an output directory equal to or inside the source (the export would overwrite or
// mix with the checkpoint it reads), and a non-empty one unless `opt.overwrite`.

Result<ExportSummary> export_msmodelslim(const std::string& src_dir, const std::string& out_dir,
                                         const ExportOptions& opt);

}  // namespace mx
