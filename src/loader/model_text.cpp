#include "loader/model_text.h"

#include "loader/checkpoint_format.h"

namespace mx {

// A path that holds no checkpoint (a tokenizer.json given as --tokenizer, or nothing) goes to
// the text layer's own loader, which reads that file or names what it looked for.

Result<std::shared_ptr<const Tokenizer>> load_model_tokenizer(const std::string& path) {
  auto format = find_checkpoint_format(path);
  if (!format.is_ok()) return Tokenizer::load(path);
  return (*format)->tokenizer(path);
}

Result<ChatTemplate> load_model_chat_template(const std::string& path) {
  auto format = find_checkpoint_format(path);
  if (!format.is_ok()) return ChatTemplate::load(path);
  return (*format)->chat_template(path);
}

}  // namespace mx
