// GGUF as a weight source: the model config from `{arch}.*` metadata, and llama.cpp's tensor
// names mapped to Hugging Face ones (`blk.N.attn_q` -> `model.layers.N.self_attn.q_proj`;
// the 3-D expert banks `ffn_{gate,up,down}_exps` are seen as one tensor per expert, each a
// view of its slice). Weights stay in their ggml blocks.
#pragma once

#include <memory>
#include <string>

#include "loader/gguf.h"
#include "loader/gguf_config.h"
#include "loader/weight_source.h"

namespace mx {

struct GgufCheckpoint {
  ModelConfig config;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<WeightSource> weights;
};
Result<GgufCheckpoint> open_gguf_source(const std::string& path);

// The Hugging Face name of a GGUF tensor name; the name itself when it has none (so
// check_all_used reports it as it is in the file). Expert banks map to
// "model.layers.N.mlp.experts" + ".gate_proj" etc. without an expert index. Blocks from
// `first_mtp_layer` on are the nextn (MTP) layers: "mtp.layers.(N - first_mtp_layer).*".
std::string gguf_to_hf_name(const std::string& gguf_name,
                            int64_t first_mtp_layer = int64_t{1} << 62);

}  // namespace mx
