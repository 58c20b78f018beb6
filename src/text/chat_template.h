// Chat templates: the Jinja subset that Qwen3, Qwen2.5 and Llama-3 templates use, rendering
// byte-identical to @huggingface/jinja (trim_blocks and lstrip_blocks on, as transformers
// renders chat templates).
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "core/status.h"

namespace mx {

namespace jinja {
struct Stmt;
}

class ChatTemplate {
 public:
  static Result<ChatTemplate> parse(const std::string& source);
  // The "chat_template" of <dir>/tokenizer_config.json (a string, or a list of named templates
  // of which "default" is used), with bos_token/eos_token from the same file.
  static Result<ChatTemplate> load(const std::string& model_dir);

  // Renders with `context` as the variables (messages, tools, add_generation_prompt,
  // enable_thinking, ...). Errors name the cause, raise_exception's message included.
  Result<std::string> render(const nlohmann::ordered_json& context) const;
  // The usual call: messages plus add_generation_prompt, with extra variables merged in.
  Result<std::string> apply(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> body_;
  std::string bos_, eos_;
};

}  // namespace mx
