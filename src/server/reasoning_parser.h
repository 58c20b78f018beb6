// The qwen3 reasoning parser: a reply's <think>...</think> part is reasoning_content, the rest
// content; whole or as the reply streams (the same result for any split of the text).
//
// The rule (vLLM's current qwen3 parser, with the start decided from the prompt):
// - Reasoning begins at the reply's start when the prompt left <think> open (Qwen3.5, and
//   Qwen3 templates that open it; see prompt_starts_in_reasoning), or when the reply itself
//   opens with <think> (after whitespace; the tag is dropped either way). Otherwise the whole
//   reply is content, untouched.
// - Reasoning ends at the first </think>, or where a <tool_call> followed (after whitespace)
//   by <function= or <function and whitespace opens: Qwen3.5 may start a call without
//   closing its thinking, and that call is content. A <tool_call> not so followed is text.
// - With no end, all of it is reasoning (the reply was cut short while thinking).
// - Newlines around the block go: '\n's at both ends of the reasoning and at the start of
//   the content after </think>, as the Qwen chat templates strip them when they render the
//   turn again. (vLLM passes them through.)
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace mx {

struct ReasoningSplit {
  std::string reasoning;
  std::string content;
};

// Whether a rendered prompt leaves the reply inside <think>: after the last
// "<|im_start|>assistant" there is a <think> that no </think> follows. enable_thinking=false
// renders "<think>\n\n</think>\n\n", which closes it.
bool prompt_starts_in_reasoning(std::string_view prompt);

// "qwen3" is the one reasoning parser; anything else fails naming it.
Status check_reasoning_parser_name(std::string_view name);

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning) : starts_in_reasoning_(starts_in_reasoning) {}

  // The whole reply at once; does not touch the streaming state.
  ReasoningSplit parse(std::string_view text) const;

  // Streaming: what to send now for the reply's next piece; finish() once it has ended.
  // Text that may be a tag still arriving, or newlines that may end the reasoning, wait.
  ReasoningSplit push(std::string_view delta);
  ReasoningSplit finish();

 private:
  enum class Phase { kStart, kReasoning, kAfterThink, kContent };
  bool step(ReasoningSplit* out);
  void add_reasoning(std::string_view s, ReasoningSplit* out);
  void emit_reasoning_before(size_t end, ReasoningSplit* out);

  bool starts_in_reasoning_;
  Phase phase_ = Phase::kStart;
  std::string buf_;  // undecided text
  bool reasoning_began_ = false;
};

}  // namespace mx
