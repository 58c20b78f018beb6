#include "server/reasoning_parser.h"

#include <algorithm>

namespace mx {

namespace {

constexpr std::string_view kThink = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kToolCall = "<tool_call>";
constexpr std::string_view kFunction = "<function";

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

size_t skip_ws(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

std::string_view strip_newlines(std::string_view s, bool left, bool right) {
  if (left)
    while (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  if (right)
    while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t k = std::min(text.size(), tag.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

enum class Follows { kYes, kNo, kMaybe };

// Whether the text after a <tool_call> opens a qwen3_coder call: whitespace, then <function
// and one of '=' or whitespace. kMaybe while what has come is a prefix of that.
Follows function_follows(std::string_view after) {
  after.remove_prefix(skip_ws(after));
  if (after.size() > kFunction.size()) {
    if (after.substr(0, kFunction.size()) != kFunction) return Follows::kNo;
    const char c = after[kFunction.size()];
    return c == '=' || is_ws(c) ? Follows::kYes : Follows::kNo;
  }
  return kFunction.substr(0, after.size()) == after ? Follows::kMaybe : Follows::kNo;
}

}  // namespace

bool prompt_starts_in_reasoning(std::string_view prompt) {
  const size_t turn = prompt.rfind("<|im_start|>assistant");
  if (turn == std::string_view::npos) return false;
  std::string_view tail = prompt.substr(turn);
  const size_t open = tail.rfind(kThink);
  if (open == std::string_view::npos) return false;
  const size_t close = tail.rfind(kThinkEnd);
  return close == std::string_view::npos || close < open;
}

Status check_reasoning_parser_name(std::string_view name) {
  if (name == "qwen3") return Status::ok();
  return invalid_argument("reasoning parser '" + std::string(name) + "': the one known is qwen3");
}

ReasoningSplit ReasoningParser::parse(std::string_view text) const {
  ReasoningSplit r;
  const size_t lead = skip_ws(text);
  size_t from = 0;
  if (text.substr(lead, kThink.size()) == kThink) {
    from = lead + kThink.size();
  } else if (!starts_in_reasoning_) {
    r.content = text;
    return r;
  }
  const size_t end = text.find(kThinkEnd, from);
  size_t call = from;
  for (;;) {
    call = text.find(kToolCall, call);
    if (call == std::string_view::npos || (end != std::string_view::npos && end < call)) {
      call = std::string_view::npos;
      break;
    }
    if (function_follows(text.substr(call + kToolCall.size())) == Follows::kYes) break;
    call += kToolCall.size();
  }
  std::string_view reasoning;
  if (call != std::string_view::npos) {
    reasoning = text.substr(from, call - from);
    r.content = text.substr(call);
  } else if (end != std::string_view::npos) {
    reasoning = text.substr(from, end - from);
    r.content = strip_newlines(text.substr(end + kThinkEnd.size()), true, false);
  } else {
    reasoning = text.substr(from);
  }
  r.reasoning = strip_newlines(reasoning, true, true);
  return r;
}

void ReasoningParser::add_reasoning(std::string_view s, ReasoningSplit* out) {
  if (!reasoning_began_) {
    s = strip_newlines(s, true, false);
    if (s.empty()) return;
    reasoning_began_ = true;
  }
  out->reasoning += s;
}

// Sends buf_ before `end` as reasoning, less the newlines it ends with, which stay until
// it is known whether the reasoning ends there.
void ReasoningParser::emit_reasoning_before(size_t end, ReasoningSplit* out) {
  const size_t cut = strip_newlines(std::string_view(buf_).substr(0, end), false, true).size();
  add_reasoning(std::string_view(buf_).substr(0, cut), out);
  buf_.erase(0, cut);
}

bool ReasoningParser::step(ReasoningSplit* out) {
  switch (phase_) {
    case Phase::kStart: {
      const size_t lead = skip_ws(buf_);
      std::string_view rest = std::string_view(buf_).substr(lead);
      if (rest.substr(0, kThink.size()) == kThink) {
        buf_.erase(0, lead + kThink.size());
        phase_ = Phase::kReasoning;
        return true;
      }
      if (rest.size() < kThink.size() && kThink.substr(0, rest.size()) == rest) return false;
      phase_ = starts_in_reasoning_ ? Phase::kReasoning : Phase::kContent;
      return true;
    }
    case Phase::kReasoning: {
      const size_t end = buf_.find(kThinkEnd);
      for (size_t call = 0;; call += kToolCall.size()) {
        call = buf_.find(kToolCall, call);
        if (call == std::string::npos || (end != std::string::npos && end < call)) break;
        const Follows f = function_follows(std::string_view(buf_).substr(call + kToolCall.size()));
        if (f == Follows::kMaybe) {
          emit_reasoning_before(call, out);
          return false;
        }
        if (f == Follows::kYes) {
          emit_reasoning_before(call, out);
          buf_.erase(0, buf_.find(kToolCall));  // the held newlines end the reasoning
          phase_ = Phase::kContent;
          return true;
        }
      }
      if (end != std::string::npos) {
        emit_reasoning_before(end, out);
        buf_.erase(0, buf_.find(kThinkEnd) + kThinkEnd.size());
        phase_ = Phase::kAfterThink;
        return true;
      }
      const size_t keep =
          std::max(partial_tag_suffix(buf_, kThinkEnd), partial_tag_suffix(buf_, kToolCall));
      emit_reasoning_before(buf_.size() - keep, out);
      return false;
    }
    case Phase::kAfterThink: {
      const size_t n = buf_.find_first_not_of('\n');
      if (n == std::string::npos) {
        buf_.clear();
        return false;
      }
      buf_.erase(0, n);
      phase_ = Phase::kContent;
      return true;
    }
    case Phase::kContent:
      out->content += buf_;
      buf_.clear();
      return false;
  }
  return false;
}

ReasoningSplit ReasoningParser::push(std::string_view delta) {
  ReasoningSplit out;
  buf_ += delta;
  while (step(&out)) {
  }
  return out;
}

ReasoningSplit ReasoningParser::finish() {
  ReasoningSplit out;
  const bool reasoning =
      phase_ == Phase::kReasoning || (phase_ == Phase::kStart && starts_in_reasoning_);
  if (reasoning) {
    add_reasoning(strip_newlines(buf_, false, true), &out);
  } else if (phase_ != Phase::kAfterThink) {
    out.content += buf_;
  }
  buf_.clear();
  phase_ = Phase::kContent;
  return out;
}

}  // namespace mx
