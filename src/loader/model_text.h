// The tokenizer and chat template of a checkpoint of any kind: tokenizer.json and
// tokenizer_config.json in a model directory, or a GGUF's tokenizer.ggml.* metadata.
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
