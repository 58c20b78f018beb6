// The tokenizer and chat template of a checkpoint of any format, where its entry in the format
// registry (loader/checkpoint_format.h) says they are: tokenizer.json and tokenizer_config.json
// in a model directory, or a GGUF's tokenizer.ggml.* metadata. A path that is no checkpoint is
// read as a tokenizer.json (or a directory holding one).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mx {

Result<std::shared_ptr<const Tokenizer>> load_model_tokenizer(const std::string& path);
// Not-found when the checkpoint has no chat template.
Result<ChatTemplate> load_model_chat_template(const std::string& path);

}  // namespace mx
