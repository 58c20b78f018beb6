// The checkpoint formats mxserve reads, one entry each: how a path is recognized as the
// format, and where its config, weights, tokenizer, chat template and end-of-generation tokens
// come from. What differs between formats is said here, so that the commands above ask the
// registry rather than test paths or file names themselves.
//
//   gguf: a file that begins with the magic GGUF (a single one, or the first part of a split
//     one). The config from its {arch}.* metadata, weights in ggml blocks, the tokenizer from
//     tokenizer.ggml.*, the template from tokenizer.chat_template; end tokens from
//     tokenizer.ggml.eos_token_id, eot_token_id and eom_token_id, and the control tokens
//     llama.cpp ends generation on by name.
//   msmodelslim: a directory holding quant_model_description.json. config.json, offline MX
//     weights in quant_model_weights*.safetensors, tokenizer.json, the template of
//     tokenizer_config.json; end tokens from eos_token_id in config.json and
//     generation_config.json.
//   safetensors: any other directory. As msmodelslim, with weights in model*.safetensors.
//
// Each entry also says how the format lays out each architecture (ArchLayout), so that the
// config readers ask the registry instead of testing the architecture.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "loader/model_config.h"
#include "loader/model_inventory.h"
#include "loader/weight_source.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mx {

// A checkpoint: its model config and its weights.
struct Checkpoint {
  ModelConfig config;
  std::unique_ptr<WeightSource> weights;
};

// How one format stores one architecture's language model, where that differs from the plain
// layout (fields at the top of the config, tensors under "model.", projections unfused).
struct ArchLayout {
  Arch arch;
  // config.json: the object holding the language model's fields, empty for the top level.
  // Qwen3.5 checkpoints wrap a vision-language model and keep them in text_config.
  std::string_view config_object;
  // The prefix of the language model's tensors under their Hugging Face names.
  std::string_view weight_prefix;
  // Gated DeltaNet's projections stored fused and interleaved per key-head group, as Qwen3-Next
  // stores in_proj_qkvz and in_proj_ba. A GGUF tells qkvz by its tensors instead: llama.cpp's
  // converter fused it only before it learned to split it.
  bool deltanet_fused_qkvz;
  bool deltanet_fused_ba;
  // Value heads stored tiled (value head j reads key head j % nk), which llama.cpp's converter
  // does for ggml's broadcast wherever there are more value heads than key heads.
  bool v_heads_tiled;
};

struct CheckpointFormat {
  std::string_view name;  // as WeightSource::kind() reports it
  // Entries are tried in list order and the first that claims a path is its format, so a
  // narrower test (a marker file) comes before the wider one it refines (a directory).
  bool (*detect)(const std::string& path);
  // The config and the weights together: a GGUF holds both in one file, read once.
  Result<Checkpoint> (*open)(const std::string& path);
  // What `mxserve inspect` reports, without loading weights.
  Result<ModelInventory> (*inspect)(const std::string& path);
  Result<std::shared_ptr<const Tokenizer>> (*tokenizer)(const std::string& path);
  // Not-found when the checkpoint carries no chat template.
  Result<ChatTemplate> (*chat_template)(const std::string& path);
  // The ids the checkpoint's own metadata names as ending generation, in any order.
  Result<std::vector<int32_t>> (*end_token_ids)(const std::string& path, const Tokenizer& tok);
  // One row per supported architecture.
  std::span<const ArchLayout> layouts;
};

// The explicit list of formats, in detection order.
const std::vector<CheckpointFormat>& checkpoint_formats();
// The format of `path`. Fails naming the path: not-found when nothing is there, invalid when
// it is a file that is not GGUF.
Result<const CheckpointFormat*> find_checkpoint_format(const std::string& path);

// How the format named `format` lays out `arch`. Every entry lists every supported
// architecture, so a miss is a bug in the registry.
const ArchLayout& checkpoint_arch_layout(std::string_view format, Arch arch);

Result<Checkpoint> open_checkpoint(const std::string& path);

// The token ids that end a generation from this checkpoint, sorted and without repeats: those
// its metadata names, and the token the chat template closes a turn with (`tmpl` may be null),
// which a base model's metadata can lack while its template still writes it.
Result<std::vector<int32_t>> checkpoint_stop_token_ids(const std::string& path,
                                                       const Tokenizer& tok,
                                                       const ChatTemplate* tmpl);

// The special token a chat template writes right after a message's content (ChatML's
// <|im_end|>, Llama 3's <|eot_id|>); nullopt when the template writes none or fails to render.
std::optional<int32_t> template_end_of_turn_token(const ChatTemplate& tmpl, const Tokenizer& tok);

}  // namespace mx
