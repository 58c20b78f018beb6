// The model config a GGUF's `{arch}.*` metadata describes, as convert_hf_to_gguf.py writes it
// for qwen3, qwen3moe, qwen35, qwen35moe and qwen3next.
#pragma once

#include "loader/gguf.h"
#include "loader/model_config.h"

namespace mx {

// Fails naming an unknown general.architecture, a missing key or an out-of-range value.
Result<ModelConfig> model_config_from_gguf(const GgufFile& f);

}  // namespace mx
