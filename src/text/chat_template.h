// Chat templates: the Jinja subset that the Qwen3, Qwen3.5, Qwen3-Coder, Qwen3-Next, Qwen2.5 and
// Llama-3 templates use (macros and call blocks included), rendering byte-identical to
// @huggingface/jinja with trim_blocks and lstrip_blocks on, as transformers renders chat
// templates. Where that peer departs from Python's Jinja (macro scoping, strip(chars)), the
// Python meaning is kept.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace mx {

namespace jinja {
struct Stmt;
}

// What one render may spend, so that neither a template nor the request it renders can hold a
// core or exhaust memory; a render that hits one fails with an error naming the limit. Parsing
// has its own fixed nesting limit (256 levels of blocks or of expressions, about 2 MB of stack
// at the deepest), and values nest at most 256 deep, so no recursion can overflow a thread's
// stack either.
struct TemplateLimits {
  // Statements run, expressions evaluated, loop iterations and list items copied, plus one per
  // 32 bytes of strings built or copied. A step costs roughly 0.1 us, so this is a couple of
  // seconds of one core. The Qwen3 template spends about 100 per short message and 220 per KB
  // of content (each byte is copied a few times): about 2 million for an 8 MiB request.
  int64_t max_steps = 20'000'000;
  // The rendered text, and any string built on the way to it.
  size_t max_output_bytes = size_t{64} << 20;
  // Items of any one list an operation builds (range, slices, filters, concatenation).
  size_t max_list_items = size_t{1} << 20;
};

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

  // The template's text (what a tool-call parser is chosen by).
  const std::string& source() const {
    static const std::string kNone;
    return source_ ? *source_ : kNone;
  }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  void set_limits(const TemplateLimits& limits) { limits_ = limits; }
  const TemplateLimits& limits() const { return limits_; }

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<jinja::Stmt>>> body_;
  std::shared_ptr<const std::string> source_;
  std::string bos_, eos_;
  TemplateLimits limits_;
};

}  // namespace mx
