#include "server/output_parser.h"

#include <optional>

#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace mx {
namespace {

class ChatOutputParser : public OutputParser {
 public:
  ChatOutputParser(const std::string& tool_parser, const std::string& reasoning, bool in_think,
                   const OJson& tools, bool parallel_calls)
      : parallel_calls_(parallel_calls) {
    if (!reasoning.empty()) reasoning_.emplace(in_think);
    if (!tool_parser.empty()) {
      auto format = tool_call_format_from_name(tool_parser);
      if (format.is_ok()) tools_.emplace(*format, tools);
    }
  }

  std::vector<OJson> push(const std::string& text) override {
    if (!reasoning_) return content(text);
    return split(reasoning_->push(text));
  }

  std::vector<OJson> finish() override {
    std::vector<OJson> out = reasoning_ ? split(reasoning_->finish()) : std::vector<OJson>{};
    if (tools_) {
      for (const ToolStreamEvent& e : tools_->finish()) {
        if (keep(e)) out.push_back(tool_stream_delta_json(e));
      }
    }
    return out;
  }

  bool whole(const std::string& text, OJson* message) override {
    ReasoningSplit parts{"", text};
    if (reasoning_) parts = reasoning_->parse(text);
    ParsedToolCalls calls{parts.content, {}};
    // A separate parser, so the streaming state (and its call ids) is not touched.
    if (tools_) calls = tools_->parse(parts.content);
    if (!parallel_calls_ && calls.calls.size() > 1) calls.calls.resize(1);
    if (message) {
      const bool only_calls = !calls.calls.empty() && calls.content.empty();
      (*message)["content"] = only_calls ? OJson() : OJson(calls.content);
      if (reasoning_ && !parts.reasoning.empty()) (*message)["reasoning_content"] = parts.reasoning;
      if (!calls.calls.empty()) (*message)["tool_calls"] = tool_calls_json(calls.calls);
    }
    return !calls.calls.empty();
  }

 private:
  std::vector<OJson> split(const ReasoningSplit& s) {
    std::vector<OJson> out;
    if (!s.reasoning.empty()) out.push_back({{"reasoning_content", s.reasoning}});
    for (OJson& j : content(s.content)) out.push_back(std::move(j));
    return out;
  }

  std::vector<OJson> content(const std::string& text) {
    std::vector<OJson> out;
    if (!tools_) {
      if (!text.empty()) out.push_back({{"content", text}});
      return out;
    }
    for (const ToolStreamEvent& e : tools_->push(text)) {
      if (keep(e)) out.push_back(tool_stream_delta_json(e));
    }
    return out;
  }

  bool keep(const ToolStreamEvent& e) const {
    return parallel_calls_ || !e.is_call || e.index == 0;
  }

  bool parallel_calls_;
  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
};

}  // namespace

std::unique_ptr<OutputParser> make_output_parser(const std::string& tool_parser,
                                                 const std::string& reasoning, bool in_think,
                                                 const OJson& tools, bool parallel_calls) {
  return std::make_unique<ChatOutputParser>(tool_parser, reasoning, in_think, tools,
                                            parallel_calls);
}

bool prompt_opens_think(const std::string& prompt_text) {
  return prompt_starts_in_reasoning(prompt_text);
}

}  // namespace mx
