// Tool calls: recorded Qwen3 (hermes) and Qwen3.5 (qwen3_coder) replies with hand-written
// expected results, parsed whole and streamed in chunks of every size and at random splits
// (the same result each way); the delta shapes; the tool-call grammars, read back by the
// parser; validation errors; and the conversation rendered through the real chat templates,
// compared with @huggingface/jinja.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/mapped_file.h"
#include "node_peer.h"
#include "server/reasoning_parser.h"
#include "server/tool_parser.h"
#include "test_util.h"
#include "text/chat_template.h"

namespace mx {
namespace {

OJson load_replies() {
  auto text = read_text_file(test::source_dir() + "/tests/data/tool_outputs/replies.json");
  EXPECT_TRUE(text.is_ok()) << text.status().to_string();
  return text.is_ok() ? OJson::parse(*text) : OJson::object();
}

bool valid_id(const std::string& id) {
  return id.size() == 29 && id.compare(0, 5, "call_") == 0 &&
         std::all_of(id.begin() + 5, id.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
}

struct Reply {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
};

// The reasoning parser, then the tool parser on its content, both fed `chunks` in turn.
Reply stream(const std::vector<std::string>& chunks, bool starts_in_reasoning,
             ToolCallFormat format, const OJson& tools, uint64_t seed) {
  ReasoningParser rp(starts_in_reasoning);
  ToolCallParser tp(format, tools, seed);
  Reply r;
  auto take = [&r](const std::vector<ToolStreamEvent>& events) {
    for (const ToolStreamEvent& e : events) {
      if (!e.is_call) {
        EXPECT_FALSE(e.content.empty());
        r.content += e.content;
      } else if (e.first) {
        EXPECT_EQ(e.index, static_cast<int>(r.calls.size()));
        EXPECT_EQ(e.arguments, "");
        r.calls.push_back({e.id, e.name, ""});
      } else {
        EXPECT_EQ(e.index + 1, static_cast<int>(r.calls.size()));
        r.calls.back().arguments += e.arguments;
      }
    }
  };
  auto feed = [&](const ReasoningSplit& s) {
    r.reasoning += s.reasoning;
    if (!s.content.empty()) take(tp.push(s.content));
  };
  for (const std::string& c : chunks) feed(rp.push(c));
  feed(rp.finish());
  take(tp.finish());
  return r;
}

std::vector<std::string> chunks_of(const std::string& s, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size(); i += n) out.push_back(s.substr(i, n));
  return out;
}

std::vector<std::string> random_split(const std::string& s, std::mt19937& rng) {
  std::vector<std::string> out;
  std::uniform_int_distribution<size_t> len(0, 9);
  for (size_t i = 0; i < s.size();) {
    const size_t n = std::min(len(rng), s.size() - i);  // empty pieces too
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

void expect_same(const Reply& got, const OJson& want, const std::string& what) {
  EXPECT_EQ(got.reasoning, want["reasoning"].get<std::string>()) << what;
  EXPECT_EQ(got.content, want["content"].get<std::string>()) << what;
  ASSERT_EQ(got.calls.size(), want["calls"].size()) << what;
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_TRUE(valid_id(got.calls[i].id)) << what << ": " << got.calls[i].id;
    EXPECT_EQ(got.calls[i].name, want["calls"][i]["name"].get<std::string>()) << what;
    const OJson args = OJson::parse(got.calls[i].arguments, nullptr, false);
    ASSERT_FALSE(args.is_discarded()) << what << ": " << got.calls[i].arguments;
    EXPECT_EQ(args, want["calls"][i]["arguments"]) << what << ": " << got.calls[i].arguments;
  }
}

TEST(ToolParser, RecordedRepliesWholeAndStreamed) {
  const OJson data = load_replies();
  ASSERT_GE(data["cases"].size(), 20u);
  std::mt19937 rng(2024);
  int streamed = 0;
  for (const OJson& c : data["cases"]) {
    const std::string name = c["name"];
    const auto format = tool_call_format_from_name(c["parser"].get<std::string>());
    ASSERT_TRUE(format.is_ok());
    const OJson& tools = c["parser"] == "hermes" ? data["hermes_tools"] : data["coder_tools"];
    const std::string output = c["output"];
    const bool sir = c["starts_in_reasoning"];

    const ReasoningSplit split = ReasoningParser(sir).parse(output);
    ToolCallParser whole_parser(*format, tools, 7);
    const ParsedToolCalls parsed = whole_parser.parse(split.content);
    const Reply whole{split.reasoning, parsed.content, parsed.calls};
    expect_same(whole, c, name + " (whole)");

    for (size_t n = 1; n <= output.size() + 1; ++n) {
      const Reply s = stream(chunks_of(output, n), sir, *format, tools, 7);
      expect_same(s, c, name + " (chunks of " + std::to_string(n) + ")");
      ASSERT_EQ(s.calls.size(), whole.calls.size());
      for (size_t i = 0; i < s.calls.size(); ++i) {
        EXPECT_EQ(s.calls[i].id, whole.calls[i].id) << "same seed, same ids";
        EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments) << name;
      }
      if (testing::Test::HasFailure()) return;
      ++streamed;
    }
    for (int k = 0; k < 200; ++k) {
      expect_same(stream(random_split(output, rng), sir, *format, tools, 7), c,
                  name + " (random split " + std::to_string(k) + ")");
      if (testing::Test::HasFailure()) return;
      ++streamed;
    }
  }
  std::printf("recorded replies: %zu, streamed %d ways in all\n", data["cases"].size(), streamed);
}

// Random texts built from tag fragments: the whole-reply parse (a separate scan) and every
// way of streaming them agree, in both forms.
TEST(ToolParser, StreamingEqualsWholeOnRandomTagSoup) {
  const std::vector<std::string> pieces = {
      "<tool_call>",
      "</tool_call>",
      "<tool_",
      "call>",
      "<function=f>",
      "<function=",
      "f>",
      "</function>",
      "<parameter=x>",
      "<parameter=n>",
      "</parameter>",
      "</param",
      "{",
      "}",
      "\"name\": \"f\", ",
      "\"arguments\": ",
      "{\"a\": [1, \"</tool_call>\"]}",
      "7",
      "true",
      "\n",
      " ",
      "  \n",
      "text",
      "<",
      ">",
      "</think>",
      "<think>",
      "é",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 1}}\n</tool_call>",
      "<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>",
      "<tool_call>\n<function=f>\n<parameter=x>\n{\"k\": \"</tool_call>\"}\n</parameter>\n",
      "<tool_call>\n<function=f>\n</function>"};
  const OJson tools = OJson::parse(
      R"([{"type":"function","function":{"name":"f","parameters":{"properties":{"n":{"type":"integer"},"x":{"type":"object"}}}}}])");
  std::mt19937 rng(77);
  std::uniform_int_distribution<size_t> pick(0, pieces.size() - 1), count(0, 24);
  int with_calls = 0;
  for (int t = 0; t < 3000; ++t) {
    std::string s;
    for (size_t n = count(rng); n > 0; --n) s += pieces[pick(rng)];
    const bool sir = t % 2 == 0;
    const ToolCallFormat format = t % 4 < 2 ? ToolCallFormat::kHermes : ToolCallFormat::kQwen3Coder;
    const ReasoningSplit split = ReasoningParser(sir).parse(s);
    ToolCallParser whole(format, tools, 1);
    const ParsedToolCalls parsed = whole.parse(split.content);
    with_calls += parsed.calls.empty() ? 0 : 1;
    OJson want = {{"reasoning", split.reasoning}, {"content", parsed.content}};
    want["calls"] = OJson::array();
    for (const ToolCall& c : parsed.calls)
      want["calls"].push_back({{"name", c.name}, {"arguments", OJson::parse(c.arguments)}});
    for (size_t n : {size_t{1}, size_t{2}, size_t{5}}) {
      expect_same(stream(chunks_of(s, n), sir, format, tools, 1), want, "soup: " + s);
    }
    expect_same(stream(random_split(s, rng), sir, format, tools, 1), want, "soup: " + s);
    if (testing::Test::HasFailure()) return;
  }
  std::printf("tag soup: 3000 texts, %d with calls\n", with_calls);
  EXPECT_GT(with_calls, 100);
}

TEST(ToolParser, IdsAreRandomPerCallAndSeedable) {
  const std::string two =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
  ToolCallParser p(ToolCallFormat::kHermes, nullptr);
  const ParsedToolCalls r1 = p.parse(two), r2 = p.parse(two);
  ASSERT_EQ(r1.calls.size(), 2u);
  EXPECT_NE(r1.calls[0].id, r1.calls[1].id);
  EXPECT_NE(r1.calls[0].id, r2.calls[0].id);
  for (const ToolCall& c : r1.calls) EXPECT_TRUE(valid_id(c.id)) << c.id;
  ToolCallParser s1(ToolCallFormat::kHermes, nullptr, 99), s2(ToolCallFormat::kHermes, nullptr, 99);
  EXPECT_EQ(s1.parse(two).calls[1].id, s2.parse(two).calls[1].id);
  ToolCallParser u1(ToolCallFormat::kHermes, nullptr), u2(ToolCallFormat::kHermes, nullptr);
  EXPECT_NE(u1.parse(two).calls[0].id, u2.parse(two).calls[0].id);
}

TEST(ToolParser, HoldsBackOnlyWhatMayBeATag) {
  ToolCallParser p(ToolCallFormat::kHermes, nullptr, 1);
  auto text = [](const std::vector<ToolStreamEvent>& ev) {
    std::string s;
    for (const auto& e : ev) s += e.is_call ? "[call]" : e.content;
    return s;
  };
  EXPECT_EQ(text(p.push("Hello <")), "Hello");  // " <" may be the start of a call
  EXPECT_EQ(text(p.push("b>bold</b> x < y")), " <b>bold</b> x < y");
  EXPECT_EQ(text(p.push(" <tool_")), "");
  EXPECT_EQ(text(p.push("box>")), " <tool_box>");
  EXPECT_EQ(text(p.push("\n\n")), "");  // whitespace waits: a call may follow
  EXPECT_EQ(text(p.push("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool")), "");
  EXPECT_EQ(text(p.push("_call>")), "[call][call]");
  EXPECT_EQ(text(p.finish()), "");
}

TEST(ToolParser, DeepNestingIsContentNotACrash) {
  const std::string deep =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": " + std::string(200000, '[') +
      "\n</tool_call>";
  ToolCallParser p(ToolCallFormat::kHermes, nullptr, 1);
  const ParsedToolCalls r = p.parse(deep);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, deep);
  const OJson tools = OJson::parse(
      R"([{"type":"function","function":{"name":"f","parameters":{"properties":{"x":{"type":"array"}}}}}])");
  ToolCallParser c(ToolCallFormat::kQwen3Coder, tools, 1);
  const std::string coder = "<tool_call>\n<function=f>\n<parameter=x>\n" +
                            std::string(200000, '[') + "\n</parameter>\n</function>\n</tool_call>";
  const ParsedToolCalls rc = c.parse(coder);
  ASSERT_EQ(rc.calls.size(), 1u);  // an unparsable array stays a string
  EXPECT_EQ(OJson::parse(rc.calls[0].arguments)["x"], std::string(200000, '['));
}

TEST(ToolParser, DeltaJsonShapes) {
  ToolCallParser p(ToolCallFormat::kHermes, nullptr, 3);
  auto ev =
      p.push("Hi.\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}}\n");
  auto more = p.push("</tool_call>");
  ev.insert(ev.end(), more.begin(), more.end());
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(tool_stream_delta_json(ev[0]).dump(), R"({"content":"Hi."})");
  const std::string id = ev[1].id;
  EXPECT_EQ(tool_stream_delta_json(ev[1]).dump(),
            R"({"tool_calls":[{"index":0,"id":")" + id +
                R"(","type":"function","function":{"name":"get_time","arguments":""}}]})");
  EXPECT_EQ(tool_stream_delta_json(ev[2]).dump(),
            R"({"tool_calls":[{"index":0,"function":{"arguments":"{\"tz\":\"UTC\"}"}}]})");
  EXPECT_EQ(tool_calls_json({{"call_x", "f", "{}"}}).dump(),
            R"([{"id":"call_x","type":"function","function":{"name":"f","arguments":"{}"}}])");
}

TEST(ToolParser, ParserNamesAndTemplates) {
  auto qwen3 = read_text_file(test::source_dir() + "/models/tiny-qwen3-moe/tokenizer_config.json");
  ASSERT_TRUE(qwen3.is_ok());
  const std::string tmpl = OJson::parse(*qwen3)["chat_template"];
  EXPECT_EQ(tool_parser_for_template(tmpl), "hermes");
  EXPECT_EQ(tool_parser_for_template("{{ '<tool_call>\\n<function=' + name + '>' }}"),
            "qwen3_coder");
  EXPECT_EQ(tool_parser_for_template("{{ '<parameter=' + p }}"), "qwen3_coder");
  EXPECT_EQ(tool_parser_for_template("{% for m in messages %}{{ m.content }}{% endfor %}"), "");
  EXPECT_EQ(*resolve_tool_parser("auto", tmpl), ToolCallFormat::kHermes);
  EXPECT_EQ(*resolve_tool_parser("qwen3_coder", tmpl), ToolCallFormat::kQwen3Coder);
  EXPECT_STREQ(tool_call_format_name(ToolCallFormat::kQwen3Coder), "qwen3_coder");
  EXPECT_STREQ(tool_call_format_name(ToolCallFormat::kHermes), "hermes");
  auto none = resolve_tool_parser("auto", "{{ messages }}");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("neither"), std::string::npos);
  auto bad = resolve_tool_parser("mistral", tmpl);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("'mistral'"), std::string::npos);
}

// --- grammars --------------------------------------------------------------------------------

OJson grammar_tools() {
  return OJson::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}},
      "required":["city"]}}},
    {"type":"function","function":{"name":"ping"}},
    {"type":"function","function":{"name":"run_query","parameters":{"type":"object",
      "properties":{"sql":{"type":"string"},"limit":{"type":"integer","minimum":1}},
      "required":["sql","limit"]}}},
    {"type":"function","function":{"name":"many","parameters":{"type":"object",
      "properties":{"a":{"type":"string"},"b":{"type":"string"},"c":{"type":"string"},
      "d":{"type":"string"},"e":{"type":"boolean"}},"required":["e"]}}}])");
}

std::string describe(const GrammarSequence& seq) {
  std::string s;
  for (const GrammarPiece& p : seq) {
    if (p.kind == GrammarPiece::Kind::kLiteral) s += "L(" + p.text + ")";
    if (p.kind == GrammarPiece::Kind::kRegex) s += "R(" + p.text + ")";
    if (p.kind == GrammarPiece::Kind::kJsonSchema) s += "J(" + p.schema.dump() + ")";
  }
  return s;
}

TEST(ToolGrammar, HermesSequences) {
  const auto seqs = tool_call_sequences(grammar_tools(), "hermes", std::nullopt);
  ASSERT_EQ(seqs.size(), 4u);
  EXPECT_EQ(describe(seqs[0]),
            "L(<tool_call>\n{\"name\": \"get_weather\", \"arguments\": )"
            "J({\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":"
            "{\"type\":\"string\",\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]})"
            "L(}\n</tool_call>)");
  EXPECT_EQ(describe(seqs[1]),
            "L(<tool_call>\n{\"name\": \"ping\", \"arguments\": )J({\"type\":\"object\"})"
            "L(}\n</tool_call>)");
  const auto one = tool_call_sequences(grammar_tools(), "hermes", "run_query");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0][0].text, "<tool_call>\n{\"name\": \"run_query\", \"arguments\": ");
  EXPECT_TRUE(tool_call_sequences(grammar_tools(), "pythonic", std::nullopt).empty());
}

TEST(ToolGrammar, Qwen3CoderSequences) {
  const auto weather = tool_call_sequences(grammar_tools(), "qwen3_coder", "get_weather");
  ASSERT_EQ(weather.size(), 2u);  // with and without the optional unit
  const std::string head = "L(<tool_call>\n<function=get_weather>\n)";
  const std::string city = "L(<parameter=city>\n)R(([^<]|<[^/])*)L(\n</parameter>\n)";
  const std::string tail = "L(</function>\n</tool_call>)";
  EXPECT_EQ(describe(weather[0]), head + city + tail);
  EXPECT_EQ(describe(weather[1]),
            head + city + "L(<parameter=unit>\n)R((c|f))L(\n</parameter>\n)" + tail);
  const auto query = tool_call_sequences(grammar_tools(), "qwen3_coder", "run_query");
  ASSERT_EQ(query.size(), 1u);
  EXPECT_EQ(describe(query[0]),
            "L(<tool_call>\n<function=run_query>\n)L(<parameter=sql>\n)R(([^<]|<[^/])*)"
            "L(\n</parameter>\n)L(<parameter=limit>\n)J({\"type\":\"integer\",\"minimum\":1})"
            "L(\n</parameter>\n)L(</function>\n</tool_call>)");
  // Four optional parameters are more than are enumerated: only the required one is written.
  const auto many = tool_call_sequences(grammar_tools(), "qwen3_coder", "many");
  ASSERT_EQ(many.size(), 1u);
  EXPECT_EQ(describe(many[0]),
            "L(<tool_call>\n<function=many>\n)L(<parameter=e>\n)J({\"type\":\"boolean\"})"
            "L(\n</parameter>\n)L(</function>\n</tool_call>)");
}

// Text the sequences allow, with values filled in by hand, is read back as those values.
TEST(ToolGrammar, WhatTheGrammarWritesParsesBack) {
  auto fill = [](const GrammarSequence& seq, const std::vector<std::string>& values) {
    std::string s;
    size_t v = 0;
    for (const GrammarPiece& p : seq)
      s += p.kind == GrammarPiece::Kind::kLiteral ? p.text : values[v++];
    return s;
  };
  const OJson tools = grammar_tools();
  const auto query = tool_call_sequences(tools, "qwen3_coder", "run_query");
  ToolCallParser coder(ToolCallFormat::kQwen3Coder, tools, 5);
  const auto r = coder.parse(fill(query[0], {"SELECT *\nFROM t", "25"}) + "\n" +
                             fill(query[0], {"SELECT 1", "1"}));
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.content, "");
  EXPECT_EQ(r.calls[0].arguments, R"({"sql":"SELECT *\nFROM t","limit":25})");
  EXPECT_EQ(r.calls[1].arguments, R"({"sql":"SELECT 1","limit":1})");
  const auto weather = tool_call_sequences(tools, "hermes", "get_weather");
  ToolCallParser hermes(ToolCallFormat::kHermes, tools, 5);
  const auto h = hermes.parse(fill(weather[0], {R"({"city": "Zürich", "unit": "c"})"}));
  ASSERT_EQ(h.calls.size(), 1u);
  EXPECT_EQ(h.calls[0].name, "get_weather");
  EXPECT_EQ(h.calls[0].arguments, R"({"city":"Zürich","unit":"c"})");
}

TEST(ToolGrammar, ToolChoiceBoundsAndErrors) {
  const OJson tools = grammar_tools();
  auto req = tool_call_grammar(tools, "required", "hermes");
  ASSERT_TRUE(req.is_ok()) << req.status().to_string();
  ASSERT_TRUE(req->has_value());
  EXPECT_EQ((*req)->alternatives.size(), 4u);
  EXPECT_EQ((*req)->min_repeat, 1);
  EXPECT_EQ((*req)->max_repeat, -1);
  EXPECT_EQ((*req)->separator, "\n");
  auto named = tool_call_grammar(
      tools, OJson::parse(R"({"type":"function","function":{"name":"ping"}})"), "qwen3_coder");
  ASSERT_TRUE(named.is_ok()) << named.status().to_string();
  EXPECT_EQ((*named)->alternatives.size(), 1u);
  EXPECT_EQ((*named)->min_repeat, 1);
  EXPECT_EQ((*named)->max_repeat, 1);
  for (const char* free : {"\"auto\"", "\"none\"", "null"}) {
    auto g = tool_call_grammar(tools, OJson::parse(free), "hermes");
    ASSERT_TRUE(g.is_ok()) << free;
    EXPECT_FALSE(g->has_value()) << free;
  }
  EXPECT_EQ(parse_tool_choice(nullptr, tools)->mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(parse_tool_choice(nullptr, nullptr)->mode, ToolChoice::Mode::kNone);

  struct Bad {
    const char* tools;
    const char* choice;
    const char* parser;
    const char* message;
  };
  const Bad bad[] = {
      {R"({"type":"function"})", "\"auto\"", "hermes", "tools: must be a list"},
      {R"([{"type":"function","function":{"name":"f"}}, 3])", "\"auto\"", "hermes",
       "tools[1]: must be an object"},
      {R"([{"type":"retrieval","function":{"name":"f"}}])", "\"auto\"", "hermes",
       "tools[0].type: must be \"function\""},
      {R"([{"type":"function"}])", "\"auto\"", "hermes", "tools[0].function: must be an object"},
      {R"([{"type":"function","function":{"name":7}}])", "\"auto\"", "hermes",
       "tools[0].function.name: must be a string"},
      {R"([{"type":"function","function":{"name":"a b"}}])", "\"auto\"", "hermes",
       "tools[0].function.name: must be non-empty"},
      {R"([{"type":"function","function":{"name":"f","parameters":[1]}}])", "\"auto\"", "hermes",
       "tools[0].function.parameters: must be an object"},
      {R"([{"type":"function","function":{"name":"f","parameters":{"properties":[]}}}])",
       "\"auto\"", "hermes", "tools[0].function.parameters.properties: must be an object"},
      {R"([{"type":"function","function":{"name":"f","parameters":{"required":"x"}}}])", "\"auto\"",
       "hermes", "tools[0].function.parameters.required: must be a list"},
      {R"([{"type":"function","function":{"name":"f"}}])", "\"sometimes\"", "hermes",
       "tool_choice: must be \"none\", \"auto\", \"required\""},
      {"[]", "\"required\"", "hermes", "tool_choice: \"required\" needs tools"},
      {R"([{"type":"function","function":{"name":"f"}}])", R"({"type":"function"})", "hermes",
       "tool_choice.function.name: must be a string"},
      {R"([{"type":"function","function":{"name":"f"}}])", R"({"function":{"name":"f"}})", "hermes",
       "tool_choice.type: must be \"function\""},
      {R"([{"type":"function","function":{"name":"f"}}])",
       R"({"type":"function","function":{"name":"g"}})", "hermes",
       "tool_choice.function.name: no tool named 'g'"},
      {R"([{"type":"function","function":{"name":"f"}}])", "\"required\"", "json",
       "tool-call parser 'json'"},
      {R"([{"type":"function","function":{"name":"f","parameters":{"properties":{"a>b":{}}}}}])",
       "\"required\"", "qwen3_coder", "tools[0].function.parameters.properties: the name 'a>b'"},
  };
  for (const Bad& b : bad) {
    auto g = tool_call_grammar(OJson::parse(b.tools), OJson::parse(b.choice), b.parser);
    ASSERT_FALSE(g.is_ok()) << b.tools << " " << b.choice;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(b.message), std::string::npos)
        << g.status().message() << " lacks " << b.message;
  }
}

// --- the conversation through the chat templates ----------------------------------------------

// The tool-call part of the Qwen3.5 / Qwen3-Coder templates: arguments iterated as a mapping.
const char* kCoderTemplate =
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- set tc = tool_call.function %}"
    "{{- '<tool_call>\\n<function=' + tc.name + '>\\n' }}"
    "{%- if tc.arguments is mapping %}"
    "{%- for args_name, args_value in tc.arguments | items %}"
    "{{- '<parameter=' + args_name + '>\\n' }}"
    "{%- if args_value is mapping or (args_value is sequence and args_value is not string) %}"
    "{{- args_value | tojson }}{%- else %}{{- args_value | string }}{%- endif %}"
    "{{- '\\n</parameter>\\n' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '</function>\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + "
    "'\\n</tool_response><|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

OJson conversation() {
  return OJson::parse(R"([
    {"role":"system","content":"You are a helpful assistant."},
    {"role":"user","content":"Weather in Paris, and run the report query?"},
    {"role":"assistant","content":"Let me check.","tool_calls":[
      {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\",\"unit\":\"c\"}"}},
      {"id":"call_2","type":"function","function":{"name":"run_query","arguments":"{\"sql\":\"SELECT *\\nFROM t\",\"limit\":5,\"options\":{\"tags\":[\"q3\"]}}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"{\"temp\": 21, \"sky\": \"clear\"}"},
    {"role":"tool","tool_call_id":"call_2","content":"3 rows"},
    {"role":"assistant","content":"","tool_calls":[
      {"id":"call_3","type":"function","function":{"name":"ping","arguments":""}},
      {"id":"call_4","type":"function","function":{"name":"get_weather","arguments":"not json"}}]},
    {"role":"tool","tool_call_id":"call_3","content":"pong"},
    {"role":"tool","tool_call_id":"call_4","content":"error: bad arguments"}])");
}

TEST(ToolMessages, ArgumentsDecodedForTheTemplate) {
  const OJson in = conversation();
  const OJson out = messages_for_template(in);
  EXPECT_EQ(out[2]["tool_calls"][0]["function"]["arguments"],
            OJson::parse(R"({"city":"Paris","unit":"c"})"));
  EXPECT_EQ(out[2]["tool_calls"][1]["function"]["arguments"]["options"]["tags"][0], "q3");
  EXPECT_EQ(out[5]["tool_calls"][0]["function"]["arguments"], OJson::object());
  EXPECT_EQ(out[5]["tool_calls"][1]["function"]["arguments"], "not json");
  for (size_t i : {0, 1, 3, 4, 6, 7}) EXPECT_EQ(out[i], in[i]) << i;
}

TEST(ToolMessages, HandDerivedQwen3Rendering) {
  auto tmpl = ChatTemplate::load(test::source_dir() + "/models/tiny-qwen3-moe");
  ASSERT_TRUE(tmpl.is_ok());
  const OJson msgs = OJson::parse(R"([
    {"role":"user","content":"Weather in Paris?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
      "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
    {"role":"tool","tool_call_id":"call_1","content":"{\"temp\": 21}"}])");
  OJson prepared = messages_for_template(msgs);
  prepared[1]["content"] = "";  // as the protocol layer hands null content on
  auto text = tmpl->apply(prepared, true);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  EXPECT_EQ(*text,
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
            "{\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ToolMessages, CoderTemplateRoundTrip) {
  auto tmpl = ChatTemplate::parse(kCoderTemplate);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  const OJson msgs = OJson::parse(R"([
    {"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function",
      "function":{"name":"run_query","arguments":"{\"sql\":\"SELECT *\\nFROM t\",\"limit\":5}"}}]}])");
  auto text = tmpl->apply(messages_for_template(msgs), false);
  ASSERT_TRUE(text.is_ok()) << text.status().to_string();
  const std::string call =
      "<tool_call>\n<function=run_query>\n<parameter=sql>\nSELECT *\nFROM t\n</parameter>\n"
      "<parameter=limit>\n5\n</parameter>\n</function>\n</tool_call>";
  EXPECT_EQ(*text, "<|im_start|>assistant\n" + call + "<|im_end|>\n");
  // The parser reads the rendered call back to the arguments the client sent.
  ToolCallParser p(ToolCallFormat::kQwen3Coder, grammar_tools(), 1);
  const auto r = p.parse(call);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(OJson::parse(r.calls[0].arguments),
            OJson::parse(R"({"sql":"SELECT *\nFROM t","limit":5})"));
}

TEST(ToolMessages, RealTemplatesMatchHuggingFaceJinja) {
  std::vector<std::string> templates;
  for (const std::string& dir : {test::source_dir() + "/models/tiny-qwen3-moe",
                                 test::shared_dir() + "/fixtures/tiny-qwen3_5-moe"}) {
    auto cfg = read_text_file(dir + "/tokenizer_config.json");
    ASSERT_TRUE(cfg.is_ok()) << dir;
    templates.push_back(OJson::parse(*cfg)["chat_template"]);
  }
  templates.push_back(kCoderTemplate);
  OJson prepared = messages_for_template(conversation());
  for (OJson& m : prepared)
    if (m["content"].is_null()) m["content"] = "";
  OJson tools = grammar_tools();
  std::vector<OJson> contexts;
  contexts.push_back({{"messages", prepared}, {"add_generation_prompt", true}});
  contexts.push_back({{"messages", prepared}, {"tools", tools}, {"add_generation_prompt", true}});
  contexts.push_back(
      {{"messages", prepared}, {"add_generation_prompt", true}, {"enable_thinking", false}});
  OJson cases = OJson::array();
  for (const std::string& t : templates)
    for (const OJson& c : contexts) cases.push_back({{"template", t}, {"context", c}});
  const OJson out = test::run_node_peer("render.mjs", cases);
  ASSERT_EQ(out.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(out[i].contains("text")) << i << ": " << out[i].dump();
    auto tmpl = ChatTemplate::parse(cases[i]["template"].get<std::string>());
    ASSERT_TRUE(tmpl.is_ok());
    auto got = tmpl->render(cases[i]["context"]);
    ASSERT_TRUE(got.is_ok()) << i << ": " << got.status().to_string();
    EXPECT_EQ(*got, out[i]["text"].get<std::string>()) << "case " << i;
    // Decoded arguments are re-serialized by the template, not pasted as the client sent them.
    EXPECT_EQ(got->find("{\"city\":\"Paris\""), std::string::npos) << i;
  }
}

}  // namespace
}  // namespace mx
