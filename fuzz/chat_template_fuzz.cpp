// libFuzzer target: a chat template (the Jinja subset). Whatever parses is rendered with a
// small conversation (system, user, an assistant turn with reasoning and tool calls, tool
// results), tools, and the values the feature templates of chat_template_test use.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "text/chat_template.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json kContext = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "What is the weather in Paris? \u65e5\u672c"},
      {"role": "assistant", "content": "<think>\nweather\n</think>\n\nLet me check.",
       "reasoning_content": "I should call the tool.",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                       "arguments": {"city": "Paris", "unit": "c"}}},
                      {"type": "function", "function": {"name": "add",
                       "arguments": "{\"a\": 1, \"b\": 2}"}}]},
      {"role": "tool", "content": "{\"temp\": 21}"},
      {"role": "tool", "content": "3"},
      {"role": "assistant", "content": "It is 21 C."},
      {"role": "user", "content": "Thanks"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather",
               "description": "Weather in a city", "parameters": {"type": "object",
               "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true,
    "enable_thinking": false,
    "xs": [3, 1, 2], "name": "Ada", "d": {"b": 2, "a": 1}, "n": 7, "f": 2.5, "flag": true,
    "nothing": null
  })");
  return kContext;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mx::fuzz::guarded("chat_template", [&] {
    auto t = mx::ChatTemplate::parse(mx::fuzz::as_string(data, size));
    if (!mx::fuzz::accepted("ChatTemplate::parse", t, "")) return;
    auto out = t->render(context());
    (void)mx::fuzz::accepted("render", out, "");
  });
  return 0;
}
