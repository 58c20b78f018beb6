// Synthetic checkpoints: the real per-layer shapes of a published model with random BF16
// weights and fewer layers, in the Hugging Face layout, so that speed can be measured at real
// sizes without downloading the model. Every command that loads a model loads one.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace mx {

struct SynthOptions {
  std::string like;           // a name from synth_model_names()
  int64_t layers = 4;         // decoder layers to write
  uint64_t seed = 1;          // weights are a pure function of the seed and the tensor name
  std::string tokenizer_dir;  // a directory with tokenizer.json and tokenizer_config.json
  std::function<void(int64_t done, int64_t total)> progress;  // per shard written
};

struct SynthSummary {
  int64_t parameters = 0;
  uint64_t bytes = 0;
  int64_t shards = 0;
};

std::vector<std::string> synth_model_names();

// Writes config.json, generation_config.json, the tokenizer (the given one, its vocabulary
// padded with filler tokens to the model's size) and one safetensors shard per layer plus one
// for the embeddings and head, with an index.
Result<SynthSummary> write_synthetic_model(const SynthOptions& opt, const std::string& out_dir);

}  // namespace mx
