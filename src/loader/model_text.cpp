#include "loader/model_text.h"

#include <fstream>

#include "loader/gguf_tokenizer.h"
#include "loader/weight_source.h"

namespace mx {

namespace {

// A file that is not GGUF (a tokenizer.json given as --tokenizer, say) is read as one.
bool holds_gguf(const std::string& path) {
  if (!is_gguf_path(path)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && std::string(magic, 4) == "GGUF";
}

}  // namespace

Result<std::shared_ptr<const Tokenizer>> load_model_tokenizer(const std::string& path) {
  if (!holds_gguf(path)) return Tokenizer::load(path);
  MX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  return tokenizer_from_gguf(f);
}

Result<ChatTemplate> load_model_chat_template(const std::string& path) {
  if (!holds_gguf(path)) return ChatTemplate::load(path);
  MX_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(path));
  std::optional<std::string> src = chat_template_from_gguf(f);
  if (!src) return not_found(path + ": no tokenizer.chat_template");
  return ChatTemplate::parse(*src);
}

}  // namespace mx
