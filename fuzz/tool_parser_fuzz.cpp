// libFuzzer target: a model's reply through the reasoning parser and both tool-call parsers,
// whole and streamed. The reply is whatever a prompt made the model write, so it is untrusted
// text; the parsers must never throw, and streaming it in the pieces the input's first bytes
// choose must give what parsing it whole gives.
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"

namespace {

const mx::OJson& tools() {
  static const mx::OJson kTools = mx::OJson::parse(R"([
    {"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"n": {"type": "integer"}, "b": {"type": "boolean"}, "o": {"type": "object"},
                     "s": {"type": "string"}}}}}])");
  return kTools;
}

// The server's text is valid UTF-8 (the decoder repairs it); the fuzzer's need not be.
std::string dump(const mx::OJson& j) {
  return j.dump(-1, ' ', false, mx::OJson::error_handler_t::replace);
}

// Splits `text` into pieces whose lengths cycle through `sizes` (1..16 bytes each).
template <typename Push>
void stream(std::string_view text, std::string_view sizes, Push&& push) {
  size_t at = 0, k = 0;
  while (at < text.size()) {
    const size_t n =
        sizes.empty() ? 1 : 1 + static_cast<unsigned char>(sizes[k++ % sizes.size()]) % 16;
    push(text.substr(at, n));
    at += n;
  }
}

void check_reasoning(std::string_view text, std::string_view sizes, bool in_think) {
  mx::ReasoningParser whole(in_think), streamed(in_think);
  const mx::ReasoningSplit want = whole.parse(text);
  mx::ReasoningSplit got;
  auto add = [&got](const mx::ReasoningSplit& s) {
    got.reasoning += s.reasoning;
    got.content += s.content;
  };
  stream(text, sizes, [&](std::string_view piece) { add(streamed.push(piece)); });
  add(streamed.finish());
  MX_FUZZ_CHECK(got.reasoning == want.reasoning && got.content == want.content,
                "reasoning streamed != whole");
}

void check_tools(std::string_view text, std::string_view sizes, mx::ToolCallFormat format) {
  mx::ToolCallParser whole(format, tools(), 1), streamed(format, tools(), 1);
  const mx::ParsedToolCalls want = whole.parse(text);
  std::string content;
  std::vector<mx::ToolCall> calls;
  auto add = [&](const std::vector<mx::ToolStreamEvent>& events) {
    for (const mx::ToolStreamEvent& e : events) {
      (void)dump(mx::tool_stream_delta_json(e));
      if (!e.is_call) {
        content += e.content;
      } else if (e.first) {
        calls.push_back({e.id, e.name, e.arguments});
      } else {
        MX_FUZZ_CHECK(!calls.empty(), "arguments before the call");
        calls.back().arguments += e.arguments;
      }
    }
  };
  stream(text, sizes, [&](std::string_view piece) { add(streamed.push(piece)); });
  add(streamed.finish());
  MX_FUZZ_CHECK(content == want.content, "tool content streamed != whole");
  MX_FUZZ_CHECK(calls.size() == want.calls.size(), "tool calls streamed != whole");
  for (size_t i = 0; i < calls.size(); ++i) {
    MX_FUZZ_CHECK(
        calls[i].name == want.calls[i].name && calls[i].arguments == want.calls[i].arguments,
        "tool call streamed != whole");
    const mx::OJson args = mx::OJson::parse(calls[i].arguments, nullptr, false);
    MX_FUZZ_CHECK(args.is_object(), "arguments are not a JSON object: " + calls[i].arguments);
  }
  (void)dump(mx::tool_calls_json(want.calls));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("tool_parser", [&] {
    const std::string input = mx::fuzz::as_string(data, size);
    // The first byte: how many of the next bytes choose the piece sizes.
    const size_t n = input.empty() ? 0 : std::min<size_t>(input.size() - 1, input[0] & 7);
    const std::string_view sizes = std::string_view(input).substr(input.empty() ? 0 : 1, n);
    const std::string_view text = std::string_view(input).substr(input.empty() ? 0 : 1 + n);
    check_reasoning(text, sizes, false);
    check_reasoning(text, sizes, true);
    (void)mx::prompt_starts_in_reasoning(text);
    check_tools(text, sizes, mx::ToolCallFormat::kHermes);
    check_tools(text, sizes, mx::ToolCallFormat::kQwen3Coder);
  });
  return 0;
}
