// The grammar engine against expectations from outside it: hand-derived accept/reject cases
// (JSON spec, UTF-8 spec, the compact output format), and a property test whose oracle is
// PCRE2's partial matching on byte-level regexes written by hand for each grammar, plus
// nlohmann::json and a small validator written here for completed documents.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "grammar_test_util.h"
#include "text/grammar.h"

namespace mx {
namespace {

using namespace grammar_test;

// --- PCRE2 oracle ---------------------------------------------------------------------

// Byte-level pieces, written from the JSON and UTF-8 specifications.
const std::string kWs = " ?";
const std::string kUtf8Multi =
    R"((?:[\xc2-\xdf][\x80-\xbf]|\xe0[\xa0-\xbf][\x80-\xbf]|[\xe1-\xec\xee\xef][\x80-\xbf]{2})"
    R"(|\xed[\x80-\x9f][\x80-\xbf]|\xf0[\x90-\xbf][\x80-\xbf]{2}|[\xf1-\xf3][\x80-\xbf]{3})"
    R"(|\xf4[\x80-\x8f][\x80-\xbf]{2}))";
const std::string kHex = "[0-9a-fA-F]";
const std::string kStrChar = R"((?:[\x20\x21\x23-\x5b\x5d-\x7f]|)" + kUtf8Multi +
                             R"(|\\(?:["\\/bfnrt]|u(?:[0-9a-cA-Ce-fE-F])" + kHex + "{3}|[dD][0-7]" +
                             kHex + "{2}|[dD][89abAB]" + kHex + R"({2}\\u[dD][c-fC-F])" + kHex +
                             "{2})))";
const std::string kStr = "\"" + kStrChar + "*\"";
// Digit counts bounded as xgrammar and llguidance bound them: 16 integer digits, 16 fraction
// digits, a 3-digit exponent.
const std::string kNum = R"(-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,16})?(?:[eE][+-]?[0-9]{1,3})?)";

class Oracle {
 public:
  explicit Oracle(const std::string& re) {
    int err = 0;
    PCRE2_SIZE off = 0;
    const std::string whole = "(?:" + re + ")\\z";
    code_ = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(whole.data()), whole.size(),
        PCRE2_ANCHORED | PCRE2_NO_AUTO_POSSESS | PCRE2_NO_START_OPTIMIZE | PCRE2_DOTALL, &err, &off,
        nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof(msg));
      ADD_FAILURE() << "oracle regex: " << msg << " at " << off;
    }
    data_ = pcre2_match_data_create(4, nullptr);
  }
  ~Oracle() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  Oracle(const Oracle&) = delete;
  Oracle& operator=(const Oracle&) = delete;

  // Some continuation of `s` is in the language.
  bool viable(const std::string& s) const { return run(s, PCRE2_PARTIAL_HARD); }
  bool complete(const std::string& s) const { return run(s, 0); }

 private:
  bool run(const std::string& s, uint32_t flags) const {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, flags,
                               data_, nullptr);
    EXPECT_TRUE(rc >= 0 || rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL) << rc;
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
  }
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

TEST(GrammarOracle, AgreesWithHandCases) {
  const Oracle o(kStr);
  EXPECT_TRUE(o.complete("\"ab\""));
  EXPECT_TRUE(o.viable("\"a"));
  EXPECT_FALSE(o.complete("\"a"));
  EXPECT_TRUE(o.viable("\"\xe6\x97"));
  EXPECT_FALSE(o.viable("\"\xff"));
  EXPECT_FALSE(o.viable("\"\\ud83d\""));
  EXPECT_TRUE(o.complete("\"\\ud83d\\ude00\""));
}

// --- a validator for the subset, written apart from the compiler ----------------------

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool validate(const json& v, const json& s, const json& root) {
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return validate(v, root.at(json::json_pointer(ref.substr(1))), root);
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const json& e : s["enum"]) {
      if (v == e) return true;
    }
    return false;
  }
  if (s.contains("anyOf")) {
    for (const json& a : s["anyOf"]) {
      if (validate(v, a, root)) return true;
    }
    return false;
  }
  if (!s.contains("type")) return true;
  const std::string t = s["type"];
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "integer") {
    if (!v.is_number_integer()) return false;
    const int64_t x = v.get<int64_t>();
    return (!s.contains("minimum") || x >= s["minimum"].get<int64_t>()) &&
           (!s.contains("maximum") || x <= s["maximum"].get<int64_t>());
  }
  if (t == "number") return v.is_number();
  if (t == "string") {
    if (!v.is_string()) return false;
    const size_t n = code_points(v.get<std::string>());
    return (!s.contains("minLength") || n >= s["minLength"].get<size_t>()) &&
           (!s.contains("maxLength") || n <= s["maxLength"].get<size_t>());
  }
  if (t == "array") {
    if (!v.is_array()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    for (const json& item : v) {
      if (s.contains("items") && !validate(item, s["items"], root)) return false;
    }
    return true;
  }
  if (t == "object") {
    if (!v.is_object()) return false;
    for (const json& r : s.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) return false;
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!s.contains("properties") || !s["properties"].contains(it.key())) return false;
      if (!validate(it.value(), s["properties"][it.key()], root)) return false;
    }
    return true;
  }
  return false;
}

// --- fixed cases ----------------------------------------------------------------------

const json kS1 = json::parse(R"({"type":"object","properties":{
  "id":{"type":"integer","minimum":0,"maximum":999},
  "tags":{"type":"array","items":{"type":"string","maxLength":3},"minItems":1,"maxItems":2},
  "kind":{"enum":["a","b",1,null]},
  "ok":{"type":"boolean","description":"ignored"}},
  "required":["id","kind"],"additionalProperties":false,"title":"S1"})");
// Keys come in the schema's order: id, tags, kind, ok.
const std::string kS1Regex =
    "\\{\"id\":" + kWs + "(?:0|[1-9][0-9]{0,2})(?:," + kWs + "\"tags\":" + kWs + "\\[\"" +
    kStrChar + "{0,3}\"(?:," + kWs + "\"" + kStrChar + "{0,3}\")?\\])?," + kWs + "\"kind\":" + kWs +
    "(?:\"a\"|\"b\"|1|null)(?:," + kWs + "\"ok\":" + kWs + "(?:true|false))?\\}";

TEST(GrammarSchema, ObjectOrderRequiredOptional) {
  EXPECT_EQ(feed_schema(kS1, R"({"id": 5, "kind": "a"})"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(kS1, R"({"id":999,"tags":["x","yz"],"kind":null,"ok":true})"),
            Verdict::kComplete);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 0, "tags": ["abc"], "kind": 1})"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 5})"), Verdict::kReject);               // kind required
  EXPECT_EQ(feed_schema(kS1, R"({"kind": "a", "id": 5})"), Verdict::kReject);  // order
  EXPECT_EQ(feed_schema(kS1, R"({"id": 5, "kind": "a", "x": 1})"), Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 5, "kind": "c"})"), Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 5,  "kind": "a"})"), Verdict::kReject);  // two spaces
  EXPECT_EQ(feed_schema(kS1, " {"), Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, "{\n"), Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, R"({ "id")"), Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 5, "kind": "a"} )"), Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 5, "kind": "a")"), Verdict::kPrefix);
}

TEST(GrammarSchema, ArraysAndStringLengthInCodePoints) {
  EXPECT_EQ(feed_schema(kS1, R"({"id": 1, "tags": [], "kind": "a"})"), Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 1, "tags": ["a", "b", "c"], "kind": "a"})"),
            Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 1, "tags": ["abcd"], "kind": "a"})"), Verdict::kReject);
  // Three code points in nine bytes, and an escape counting as one.
  EXPECT_EQ(
      feed_schema(
          kS1,
          "{\"id\": 1, \"tags\": [\"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\"], \"kind\": \"a\"}"),
      Verdict::kComplete);
  EXPECT_EQ(
      feed_schema(
          kS1,
          "{\"id\": 1, \"tags\": [\"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9ex\"], \"kind\": \"a\"}"),
      Verdict::kReject);
  EXPECT_EQ(feed_schema(kS1, R"({"id": 1, "tags": ["\n\u00e9a"], "kind": "a"})"),
            Verdict::kComplete);
  const json s = {{"type", "string"}, {"minLength", 2}, {"maxLength", 4}};
  EXPECT_EQ(feed_schema(s, "\"a\""), Verdict::kReject);
  EXPECT_EQ(feed_schema(s, "\"ab\""), Verdict::kComplete);
  EXPECT_EQ(feed_schema(s, "\"abcd\""), Verdict::kComplete);
  EXPECT_EQ(feed_schema(s, "\"abcde\""), Verdict::kReject);
  const json tuple = json::parse(
      R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false})");
  EXPECT_EQ(feed_schema(tuple, "[1, \"a\"]"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(tuple, "[1]"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(tuple, "[1, \"a\", 2]"), Verdict::kReject);
  EXPECT_EQ(feed_schema(tuple, "[\"a\"]"), Verdict::kReject);
}

TEST(GrammarSchema, StringsAreValidUtf8WithJsonEscapes) {
  const json s = {{"type", "string"}};
  EXPECT_EQ(feed_schema(s, R"("a\"b\\c\/\b\f\n\r\t")"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(s, R"("\ud83d\ude00")"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(s, R"("\ud83d")"), Verdict::kReject);  // lone high surrogate
  EXPECT_EQ(feed_schema(s, R"("\ude00")"), Verdict::kReject);  // lone low surrogate
  EXPECT_EQ(feed_schema(s, R"("\x")"), Verdict::kReject);
  EXPECT_EQ(feed_schema(s, "\"\x01\""), Verdict::kReject);              // raw control character
  EXPECT_EQ(feed_schema(s, "\"\xff\""), Verdict::kReject);              // never in UTF-8
  EXPECT_EQ(feed_schema(s, "\"\xc0\x80\""), Verdict::kReject);          // overlong
  EXPECT_EQ(feed_schema(s, "\"\xed\xa0\x80\""), Verdict::kReject);      // encoded surrogate
  EXPECT_EQ(feed_schema(s, "\"\xf4\x90\x80\x80\""), Verdict::kReject);  // past U+10FFFF
  EXPECT_EQ(feed_schema(s, "\"\xf0\x9f\x98\x80\xc3\xa9\""), Verdict::kComplete);
  EXPECT_EQ(feed_schema(s, "\"\xe6\x97"), Verdict::kPrefix);
}

TEST(GrammarSchema, IntegerBoundsAndNumbers) {
  const json s = {{"type", "integer"}, {"minimum", 10}, {"maximum", 250}};
  for (const char* ok : {"10", "99", "100", "250", "199"}) {
    EXPECT_EQ(feed_schema(s, ok), Verdict::kComplete) << ok;
  }
  for (const char* bad : {"9", "251", "300", "0", "-1", "010", "1000"}) {
    EXPECT_NE(feed_schema(s, bad), Verdict::kComplete) << bad;
  }
  const json neg = {{"type", "integer"}, {"minimum", -20}, {"exclusiveMaximum", 0}};
  EXPECT_EQ(feed_schema(neg, "-20"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(neg, "-1"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(neg, "0"), Verdict::kReject);
  EXPECT_EQ(feed_schema(neg, "-21"), Verdict::kReject);
  const json nonneg = {{"type", "integer"}, {"minimum", 0}};
  EXPECT_EQ(feed_schema(nonneg, "-"), Verdict::kReject);
  EXPECT_EQ(feed_schema(nonneg, "12345678901234"), Verdict::kComplete);
  const json num = {{"type", "number"}};
  for (const char* ok : {"0", "-1.5e+3", "2E7", "0.25", "-0"}) {
    EXPECT_EQ(feed_schema(num, ok), Verdict::kComplete) << ok;
  }
  EXPECT_EQ(feed_schema(num, "01"), Verdict::kReject);
  EXPECT_EQ(feed_schema(num, ".5"), Verdict::kReject);
  EXPECT_EQ(feed_schema(num, "1."), Verdict::kPrefix);
  EXPECT_EQ(feed_schema(num, "+1"), Verdict::kReject);
  EXPECT_EQ(feed_schema(num, "1" + std::string(16, '0')), Verdict::kReject);  // 17 digits
  EXPECT_EQ(feed_schema(num, "0." + std::string(17, '0')), Verdict::kReject);
  EXPECT_EQ(feed_schema(num, "1e1000"), Verdict::kReject);
}

const json kS2 = json::parse(
    R"({"anyOf":[{"type":"string","minLength":2,"maxLength":4},{"const":{"x":[1,2]}},
                 {"type":"null"}]})");
const std::string kS2Regex = "\"" + kStrChar + "{2,4}\"|\\{\"x\":\\[1,2\\]\\}|null";

const json kS3 = json::parse(R"({"$defs":{"node":{"type":"object","properties":{
  "kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":2},
  "v":{"type":"integer","minimum":-5,"maximum":5}},"required":["v"]}},
  "$ref":"#/$defs/node"})");
const std::string kS3Regex = "(?<node>\\{(?:\"kids\":" + kWs + "\\[(?:(?&node)(?:," + kWs +
                             "(?&node))?)?\\]," + kWs + ")?\"v\":" + kWs + "(?:-[1-5]|[0-5])\\})";

TEST(GrammarSchema, EnumConstAnyOfAndRecursion) {
  EXPECT_EQ(feed_schema(kS2, R"({"x":[1,2]})"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(kS2, R"({"x": [1,2]})"), Verdict::kReject);  // const is exact
  EXPECT_EQ(feed_schema(kS2, "null"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(kS2, "\"abc\""), Verdict::kComplete);
  EXPECT_EQ(feed_schema(kS2, "true"), Verdict::kReject);
  EXPECT_EQ(feed_schema(kS3, R"({"v": 1})"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(kS3, R"({"kids": [{"v": -5}, {"kids": [{"v": 0}], "v": 2}], "v": 3})"),
            Verdict::kComplete);
  EXPECT_EQ(feed_schema(kS3, R"({"kids": [{"v": 1}, {"v": 1}, {"v": 1}], "v": 3})"),
            Verdict::kReject);
  EXPECT_EQ(feed_schema(kS3, R"({"v": 6})"), Verdict::kReject);
  const json types = {{"type", {"integer", "null"}}};
  EXPECT_EQ(feed_schema(types, "null"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(types, "7"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(types, "\"7\""), Verdict::kReject);
}

TEST(GrammarSchema, AdditionalPropertiesAndAnyJson) {
  const json map = {{"type", "object"}, {"additionalProperties", {{"type", "integer"}}}};
  EXPECT_EQ(feed_schema(map, R"({"a": 1, "b": 2})"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(map, "{}"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(map, R"({"a": "x"})"), Verdict::kReject);
  const json closed = {{"type", "object"}, {"additionalProperties", false}};
  EXPECT_EQ(feed_schema(closed, "{}"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(closed, R"({"a")"), Verdict::kReject);
  EXPECT_EQ(feed_schema(json::object(), R"([1, {"a": null}, "x", -2.5e3, true])"),
            Verdict::kComplete);
  const auto obj = must(grammar_any_json_object());
  EXPECT_EQ(feed(obj, "{}"), Verdict::kComplete);
  EXPECT_EQ(feed(obj, R"({"a": [1, {"b": {}}], "c": "d"})"), Verdict::kComplete);
  EXPECT_EQ(feed(obj, "[]"), Verdict::kReject);
  EXPECT_EQ(feed(obj, "{} "), Verdict::kReject);
  // Nesting is as deep as the output goes (as in llama.cpp's and XGrammar's JSON grammars);
  // every level still closes what it opened.
  std::string deep, close;
  for (int i = 0; i < 200; ++i) {
    deep += i % 2 ? "[" : "{\"a\":";
    close = (i % 2 ? "]" : "}") + close;
  }
  EXPECT_EQ(feed(obj, deep + "1" + close), Verdict::kComplete);
  EXPECT_EQ(feed(obj, deep + "{}" + close), Verdict::kComplete);
  EXPECT_EQ(feed(obj, deep + "1" + close.substr(0, close.size() - 1)), Verdict::kPrefix);
  EXPECT_EQ(feed(obj, deep + "1}"), Verdict::kReject);  // the innermost is an array
  EXPECT_EQ(feed(obj, deep + "1" + close + "}"), Verdict::kReject);
}

TEST(GrammarSchema, ErrorsNameTheCause) {
  expect_error({{"not", {{"type", "string"}}}}, "'not'");
  expect_error({{"type", "object"}, {"patternProperties", json::object()}}, "'patternProperties'");
  expect_error({{"if", json::object()}, {"then", json::object()}}, "'if'");
  expect_error({{"type", "array"}, {"uniqueItems", true}}, "'uniqueItems'");
  expect_error({{"$ref", "https://example.com/s.json"}}, "remote $ref");
  expect_error({{"$ref", "#/$defs/missing"}}, "#/$defs/missing");
  expect_error(json::parse(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},
                               "$ref":"#/$defs/a"})"),
               "left recursion");
  expect_error({{"type", "strin"}}, "strin");
  expect_error({{"type", "string"}, {"maxLength", 1000000}}, "maxLength");
  expect_error(json::parse(R"({"type":"array","maxItems":5000,
                 "items":{"type":"array","maxItems":5000,"items":{"type":"integer"}}})"),
               "grammar too large");
  EXPECT_TRUE(grammar_from_json_schema({{"type", "array"}, {"uniqueItems", false}}).is_ok());
  EXPECT_TRUE(grammar_from_json_schema(
                  {{"type", "string"}, {"format", "date-time"}, {"title", "t"}, {"default", "x"}})
                  .is_ok());
}

TEST(GrammarRegex, Cases) {
  struct Case {
    const char* re;
    const char* text;
    Verdict want;
  };
  const Case cases[] = {
      {R"(\d{3}-\d{4})", "555-1234", Verdict::kComplete},
      {R"(\d{3}-\d{4})", "5555-1234", Verdict::kReject},
      {R"(\d{3}-\d{4})", "555-12", Verdict::kPrefix},
      {"[^a-c]+", "xyz", Verdict::kComplete},
      {"[^a-c]+", "\xc3\xa9", Verdict::kComplete},
      {"[^a-c]+", "xa", Verdict::kReject},
      {"(foo|bar)+baz", "foobarfoobaz", Verdict::kComplete},
      {"(?:foo|bar)+baz", "baz", Verdict::kReject},
      {"^abc$", "abc", Verdict::kComplete},
      {"a.c", "a\nc", Verdict::kReject},
      {"a.c",
       "a\xe4\xb8\xad"
       "c",
       Verdict::kComplete},
      {R"(\w+@\w+\.com)", "me@x.com", Verdict::kComplete},
      {R"(\w+@\w+\.com)", "me@xycom", Verdict::kPrefix},
      {R"(\w+@\w+\.com)", "me@x-com", Verdict::kReject},
      {"a{2}", "aaa", Verdict::kReject},
      {"a{2,}", "aaaaa", Verdict::kComplete},
      {"a{1,3}b?", "aaab", Verdict::kComplete},
      {"(a*)*b", "aab", Verdict::kComplete},
      {"[-a]x{", "-x{", Verdict::kComplete},
      {R"([\d.]+)", "3.14", Verdict::kComplete},
      {"\xe6\x97\xa5+", "\xe6\x97\xa5\xe6\x97\xa5", Verdict::kComplete},
      {"(?<year>[0-9]{4})", "2024", Verdict::kComplete},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(feed(must(grammar_from_regex(c.re)), c.text), c.want) << c.re << " / " << c.text;
  }
}

TEST(GrammarRegex, ErrorsNamePosition) {
  struct Case {
    const char* re;
    const char* needle;
  };
  for (const Case& c :
       {Case{"a(b", "missing ')' at position 3"}, Case{"a)b", "position 1"},
        Case{"a{2,1}", "n < m"}, Case{"(?=x)", "lookaround"}, Case{"a{1000000}", "limit"},
        Case{"[b-a]", "out of order"}, Case{"*a", "position 0"}, Case{"\\1", "unsupported escape"},
        Case{"[abc", "missing ']'"}, Case{"a^", "'^'"}}) {
    auto r = grammar_from_regex(c.re);
    ASSERT_FALSE(r.is_ok()) << c.re;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(grammar_from_regex("(a{1000}){1000}").is_ok());
}

TEST(GrammarChoices, ExactlyOne) {
  const auto g = must(grammar_from_choices({"yes", "no", "yesterday"}));
  EXPECT_EQ(feed(g, "yes"), Verdict::kComplete);
  EXPECT_EQ(feed(g, "yest"), Verdict::kPrefix);
  EXPECT_EQ(feed(g, "yesterday"), Verdict::kComplete);
  EXPECT_EQ(feed(g, "maybe"), Verdict::kReject);
  EXPECT_EQ(feed(g, "yesno"), Verdict::kReject);
  EXPECT_FALSE(grammar_from_choices({}).is_ok());
}

const json kToolSchema = json::parse(
    R"({"type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["c","f"]}},
        "required":["city"]})");
const std::string kToolHead = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": ";
const std::string kToolTail = "}\n</tool_call>";

std::shared_ptr<const Grammar> tool_grammar(int min, int max) {
  GrammarSequence seq = {GrammarPiece::literal(kToolHead), GrammarPiece::json(kToolSchema),
                         GrammarPiece::literal(kToolTail)};
  return must(grammar_from_sequences({seq}, min, max, "\n"));
}

TEST(GrammarSequences, ToolCalls) {
  const auto g = tool_grammar(1, -1);
  const std::string one = kToolHead + R"({"city": "Paris"})" + kToolTail;
  const std::string two = kToolHead + R"({"city": "Oslo", "unit": "c"})" + kToolTail;
  EXPECT_EQ(feed(g, one), Verdict::kComplete);
  EXPECT_EQ(feed(g, one + "\n" + two + "\n" + one), Verdict::kComplete);
  EXPECT_EQ(feed(g, ""), Verdict::kPrefix);
  EXPECT_EQ(feed(g, one + "\n"), Verdict::kPrefix);
  EXPECT_EQ(feed(g, one + one), Verdict::kReject);
  EXPECT_EQ(feed(g, kToolHead + R"({"unit": "c"})"), Verdict::kReject);
  const auto at_most_two = tool_grammar(0, 2);
  EXPECT_EQ(feed(at_most_two, ""), Verdict::kComplete);
  EXPECT_EQ(feed(at_most_two, one + "\n" + one), Verdict::kComplete);
  EXPECT_EQ(feed(at_most_two, one + "\n" + one + "\n"), Verdict::kReject);
  GrammarSequence mixed = {GrammarPiece::literal("n="), GrammarPiece::regex("[0-9]+")};
  GrammarSequence other = {GrammarPiece::literal("s="), GrammarPiece::json({{"type", "string"}})};
  const auto g2 = must(grammar_from_sequences({mixed, other}, 2, 2, ";"));
  EXPECT_EQ(feed(g2, "n=12;s=\"x\""), Verdict::kComplete);
  EXPECT_EQ(feed(g2, "n=12"), Verdict::kPrefix);
  EXPECT_EQ(feed(g2, "n=1;n=2;n=3"), Verdict::kReject);
  EXPECT_FALSE(grammar_from_sequences({mixed}, 3, 2, "").is_ok());
  auto bad = grammar_from_sequences({{GrammarPiece::regex("(")}}, 1, 1, "");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("piece 0"), std::string::npos);
}

TEST(GrammarMatcher, MultiByteTokensStopAndSpecial) {
  const SmallVocab& v = small_vocab();
  const auto g = must(grammar_from_json_schema(kS1));
  GrammarMatcher m(g, v.vocab);
  const size_t words = (v.tokens.size() + 31) / 32;
  std::vector<uint32_t> mask(words);
  auto allowed = [&](int32_t t) {
    m.fill_mask(mask.data());
    return ((mask[t >> 5] >> (t & 31)) & 1) != 0;
  };
  EXPECT_TRUE(allowed(v.id_of("{\"")));
  EXPECT_FALSE(allowed(v.stop));
  EXPECT_FALSE(allowed(v.special));
  EXPECT_FALSE(allowed(v.empty));
  EXPECT_FALSE(m.accept(v.stop));
  EXPECT_FALSE(m.accept(v.special));
  EXPECT_FALSE(m.accept(v.empty));
  EXPECT_TRUE(m.accept(v.id_of("{\"")));
  for (char c : std::string("id")) EXPECT_TRUE(m.accept(static_cast<unsigned char>(c)));
  EXPECT_TRUE(allowed(v.id_of("\": ")));
  EXPECT_FALSE(allowed(v.id_of("\"}")));
  EXPECT_TRUE(m.accept(v.id_of("\": ")));
  for (char c : std::string("7, \"kind")) EXPECT_TRUE(m.accept(static_cast<unsigned char>(c)));
  EXPECT_TRUE(m.accept(v.id_of("\":")));
  EXPECT_FALSE(allowed(v.id_of("true")));
  EXPECT_TRUE(allowed(v.id_of("null")));
  EXPECT_TRUE(m.accept(v.id_of("null")));
  EXPECT_TRUE(allowed(v.id_of("}")));
  EXPECT_FALSE(m.can_end());
  EXPECT_TRUE(m.accept('}'));
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.must_end());
  m.fill_mask(mask.data());
  for (size_t t = 0; t < v.tokens.size(); ++t) {
    EXPECT_EQ((mask[t >> 5] >> (t & 31)) & 1, t == static_cast<size_t>(v.stop) ? 1u : 0u) << t;
  }
  EXPECT_TRUE(m.accept(v.stop));
  EXPECT_FALSE(m.accept('a'));
  // A token that ends inside a UTF-8 sequence and one that finishes it.
  const auto s = must(grammar_from_json_schema({{"type", "string"}, {"maxLength", 1}}));
  GrammarMatcher u(s, v.vocab);
  EXPECT_TRUE(u.accept('"'));
  EXPECT_TRUE(u.accept(v.id_of("\xe6\x97")));
  EXPECT_FALSE(u.accept(v.id_of("\xa5\xe6")));  // completes the character, starts a second
  EXPECT_TRUE(u.accept(0xa5));
  EXPECT_TRUE(u.accept(v.id_of("\"")));
  EXPECT_TRUE(u.can_end());
}

// A draft's part the grammar takes, found without moving the matcher: the expected counts are
// where a text of the tokens stops being a prefix of a kS1 document, and a stop token counts
// only where a document may end.
TEST(GrammarMatcher, AllowedPrefixOfADraft) {
  const SmallVocab& v = small_vocab();
  const auto g = must(grammar_from_json_schema(kS1));
  GrammarMatcher m(g, v.vocab);
  const size_t words = (v.tokens.size() + 31) / 32;
  std::vector<uint32_t> before(words), after(words);
  auto ids = [&](const std::vector<std::string>& pieces) {
    std::vector<int32_t> out;
    for (const std::string& p : pieces) out.push_back(p == "STOP" ? v.stop : v.id_of(p));
    return out;
  };
  EXPECT_TRUE(m.accept(v.id_of("{\"")));
  m.fill_mask(before.data());
  const std::vector<std::string> doc = {"i", "d", "\": ", "7", ",",   " ",    "\"",
                                        "k", "i", "n",    "d", "\":", "null", "}"};
  std::vector<std::string> draft = doc;
  draft.insert(draft.end(), {"STOP", "x"});
  EXPECT_EQ(m.allowed_prefix(ids(draft)), doc.size() + 1);
  EXPECT_EQ(m.allowed_prefix(ids({"i", "d", "\": ", "7", "}"})), 4u);  // kind is required
  EXPECT_EQ(m.allowed_prefix(ids({"i", "d", "\": ", "7", "STOP"})), 4u);
  EXPECT_EQ(m.allowed_prefix(ids({"i", "d", "\":", "true"})), 3u);  // id is an integer
  EXPECT_EQ(m.allowed_prefix(ids({"x", "i"})), 0u);
  EXPECT_EQ(m.allowed_prefix({}), 0u);
  EXPECT_EQ(m.allowed_prefix({v.special, 'i'}), 0u);
  m.fill_mask(after.data());
  EXPECT_EQ(before, after);
  // The matcher goes on from where it was.
  for (int32_t t : ids(doc)) EXPECT_TRUE(m.accept(t));
  EXPECT_TRUE(m.must_end());
  EXPECT_EQ(m.allowed_prefix(ids({"STOP", "STOP"})), 1u);
  EXPECT_TRUE(m.accept(v.stop));
  EXPECT_EQ(m.allowed_prefix(ids({"STOP"})), 0u);
}

// --- the property test ----------------------------------------------------------------

// Tokens built from pieces of JSON syntax, letters, digits and UTF-8 (whole and cut).
std::vector<std::string> random_tokens(std::mt19937& rng, int n) {
  const std::vector<std::string> atoms = {"{",
                                          "}",
                                          "[",
                                          "]",
                                          "\"",
                                          ":",
                                          ",",
                                          " ",
                                          "\n",
                                          "a",
                                          "b",
                                          "c",
                                          "x",
                                          "y",
                                          "z",
                                          "e",
                                          "E",
                                          "0",
                                          "1",
                                          "2",
                                          "5",
                                          "9",
                                          "-",
                                          "+",
                                          ".",
                                          "\\",
                                          "n",
                                          "u",
                                          "d",
                                          "8",
                                          "3",
                                          "t",
                                          "r",
                                          "f",
                                          "l",
                                          "s",
                                          "\xc3\xa9",
                                          "\xe4\xb8\xad",
                                          "\xf0\x9f\x98\x80",
                                          "\xc3",
                                          "\xa9",
                                          "\xe4\xb8",
                                          "\xad",
                                          "\x9f\x98",
                                          "null",
                                          "true",
                                          "false",
                                          "\"v\"",
                                          "\"kids\"",
                                          "\"id\"",
                                          "\"kind\"",
                                          "\"tags\"",
                                          "\"ok\"",
                                          "\"city\"",
                                          "\"unit\"",
                                          "<tool_call>",
                                          "</tool_call>",
                                          "\xff",
                                          "\x01",
                                          "yes",
                                          "no"};
  std::vector<std::string> out;
  std::uniform_int_distribution<size_t> pick(0, atoms.size() - 1);
  std::uniform_int_distribution<int> len(2, 4);
  for (int i = 0; i < n; ++i) {
    std::string t;
    for (int k = len(rng); k > 0; --k) t += atoms[pick(rng)];
    out.push_back(t);
  }
  return out;
}

struct PropertyCase {
  const char* name;
  std::shared_ptr<const Grammar> grammar;
  std::string oracle_regex;
  const json* schema = nullptr;  // completed documents must parse and validate
  int steps = 48;
};

// The mask against the oracle at every byte of `doc` (fed as single-byte tokens): walks
// along documents nested deep enough for tokens that close several values at once.
void check_prefixes(const PropertyCase& pc, const SmallVocab& v, const std::string& doc) {
  const Oracle oracle(pc.oracle_regex);
  GrammarMatcher m(pc.grammar, v.vocab);
  std::vector<uint32_t> mask((v.tokens.size() + 31) / 32);
  std::string text;
  for (size_t i = 0; i <= doc.size(); ++i) {
    m.fill_mask(mask.data());
    for (size_t t = 0; t < v.tokens.size(); ++t) {
      const bool bit = (mask[t >> 5] >> (t & 31)) & 1;
      bool want = false;
      if (static_cast<int32_t>(t) == v.stop) {
        want = oracle.complete(text);
      } else if (static_cast<int32_t>(t) != v.special && !v.tokens[t].empty()) {
        want = oracle.viable(text + v.tokens[t]);
      }
      ASSERT_EQ(bit, want) << pc.name << " after '" << text << "' token '" << v.tokens[t] << "'";
    }
    if (i == doc.size()) break;
    ASSERT_TRUE(m.accept(static_cast<unsigned char>(doc[i]))) << pc.name << " at " << i;
    text += doc[i];
  }
  EXPECT_TRUE(m.can_end()) << pc.name;
}

void run_walks(const PropertyCase& pc, const SmallVocab& v, uint32_t seed) {
  const Oracle oracle(pc.oracle_regex);
  std::mt19937 rng(seed);
  const size_t words = (v.tokens.size() + 31) / 32;
  std::vector<uint32_t> mask(words);
  int completed = 0;
  const std::string prefer = "}]\"0a";
  for (int walk = 0; walk < 12; ++walk) {
    GrammarMatcher m(pc.grammar, v.vocab);
    std::string text;
    for (int step = 0; step < pc.steps; ++step) {
      m.fill_mask(mask.data());
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < v.tokens.size(); ++t) {
        const bool bit = (mask[t >> 5] >> (t & 31)) & 1;
        bool want = false;
        if (static_cast<int32_t>(t) == v.stop) {
          want = oracle.complete(text);
        } else if (static_cast<int32_t>(t) != v.special && !v.tokens[t].empty()) {
          want = oracle.viable(text + v.tokens[t]);
        }
        ASSERT_EQ(bit, want) << pc.name << " seed " << seed << " walk " << walk << " after '"
                             << text << "' token '" << v.tokens[t] << "'";
        if (bit) allowed.push_back(static_cast<int32_t>(t));
      }
      ASSERT_FALSE(allowed.empty()) << pc.name << " dead end after '" << text << "'";
      int32_t next = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      // Past half way, steer toward an end so that documents complete.
      if (step > pc.steps / 2) {
        for (char c : prefer) {
          if (std::find(allowed.begin(), allowed.end(), static_cast<unsigned char>(c)) !=
              allowed.end()) {
            next = static_cast<unsigned char>(c);
            break;
          }
        }
        if (std::find(allowed.begin(), allowed.end(), v.stop) != allowed.end()) next = v.stop;
      }
      ASSERT_TRUE(m.accept(next));
      if (next == v.stop) break;
      text += v.tokens[next];
    }
    if (!m.can_end()) continue;
    ++completed;
    if (pc.schema != nullptr) {
      json doc;
      ASSERT_NO_THROW(doc = json::parse(text)) << text;
      EXPECT_TRUE(validate(doc, *pc.schema, *pc.schema)) << pc.name << ": " << text;
    }
  }
  EXPECT_GT(completed, 0) << pc.name << " seed " << seed;
}

const SmallVocab& property_vocab() {
  static const SmallVocab v = [] {
    std::mt19937 rng(20240601);
    std::vector<std::string> tokens = random_tokens(rng, 300);
    // Tokens that close two or three nested values at once: their fate depends on the stack
    // below the positions they start from.
    for (const char* t : {"}]}", "}]}]", "}}}", "}},", "]}]", "1}]}", "}]}, ", "]]]", "}]]", "]}}",
                          "}]},{", "0}]}"}) {
      tokens.emplace_back(t);
    }
    return SmallVocab(std::move(tokens));
  }();
  return v;
}

const json kBounded = {{"type", "string"}, {"maxLength", 6}};
const json kPattern = {{"type", "string"}, {"pattern", "[a-e0-9]{2,5}(x|[.,]{1,3})"}};

std::vector<PropertyCase> property_cases() {
  const std::string tool =
      "<tool_call>\\n\\{\"name\": \"get_weather\", \"arguments\": \\{\"city\":" + kWs + kStr +
      "(?:," + kWs + "\"unit\":" + kWs + "(?:\"c\"|\"f\"))?\\}\\}\\n</tool_call>";
  const std::string any_value = "(?:" + kStr + "|" + kNum + "|true|false|null|(?&obj)|(?&arr))";
  const std::string any_obj = "(?<obj>\\{(?:" + kStr + ":" + kWs + any_value + "(?:," + kWs + kStr +
                              ":" + kWs + any_value + ")*)?\\})";
  const std::string any_arr = "(?<arr>\\[(?:" + any_value + "(?:," + kWs + any_value + ")*)?\\])";
  return {
      {"S1", must(grammar_from_json_schema(kS1)), kS1Regex, &kS1},
      {"S2", must(grammar_from_json_schema(kS2)), kS2Regex, &kS2},
      {"S3", must(grammar_from_json_schema(kS3)), kS3Regex, &kS3},
      {"json_object", must(grammar_any_json_object()), any_obj + "(?(DEFINE)" + any_arr + ")"},
      {"tool", tool_grammar(1, -1), tool + "(?:\\n" + tool + ")*", nullptr, 160},
      {"regex", must(grammar_from_regex("[a-c]{2,3}(x|yz)*\\d?[^a]")),
       "[a-c]{2,3}(?:x|yz)*[0-9]?(?:[\\x00-\\x60\\x62-\\x7f]|" + kUtf8Multi + ")"},
      {"choices", must(grammar_from_choices({"yes", "no", "maybe", "yesterday"})),
       "yes|no|maybe|yesterday"},
      // A bounded string body and a pattern of counted classes: the walks' subtree skips.
      {"bounded", must(grammar_from_json_schema(kBounded)), "\"" + kStrChar + "{0,6}\"", &kBounded},
      {"pattern", must(grammar_from_json_schema(kPattern)), "\"[a-e0-9]{2,5}(?:x|[.,]{1,3})\"",
       &kPattern},
  };
}

TEST(GrammarProperty, MaskEqualsBruteForceOracle) {
  const SmallVocab& v = property_vocab();
  const std::vector<PropertyCase> cases = property_cases();
  for (const PropertyCase& pc : cases) {
    ASSERT_NE(pc.grammar, nullptr) << pc.name;
    for (uint32_t seed : {1u, 2u}) run_walks(pc, v, seed);
  }
  check_prefixes(cases[2], v, R"({"kids": [{"kids": [{"v": 1}, {"v": 0}], "v": 2}], "v": 3})");
  check_prefixes(cases[2], v, R"({"kids":[{"kids":[{"kids":[{"v":-1}],"v":4}],"v":0}],"v":5})");
  check_prefixes(cases[3], v, R"({"a": [[1, {"b": [2]}], {"c": {"d": {}}}], "e": "x"})");
  check_prefixes(cases[3], v, R"({"a":{"b":{"c":[[[]]]}},"d":[{},{"e":null}]})");
}

// The same walks over grammars whose masks were all computed before the first token.
TEST(GrammarProperty, MasksComputedAheadEqualTheOracle) {
  const SmallVocab& v = property_vocab();
  for (const PropertyCase& pc : property_cases()) {
    ASSERT_NE(pc.grammar, nullptr) << pc.name;
    ASSERT_TRUE(precompute_masks(*pc.grammar, *v.vocab, std::chrono::hours(1))) << pc.name;
    run_walks(pc, v, 3);
  }
  // A budget of nothing computes nothing and says so; the matcher still masks correctly.
  const PropertyCase pc = property_cases()[0];
  EXPECT_FALSE(precompute_masks(*pc.grammar, *v.vocab, std::chrono::microseconds(0)));
  run_walks(pc, v, 4);
}

TEST(GrammarMatcher, ConcurrentMatchersShareOneGrammar) {
  std::mt19937 rng(7);
  const SmallVocab v(random_tokens(rng, 200));
  const auto g = must(grammar_from_json_schema(kS3));
  const std::string doc = R"({"kids": [{"v": -5}, {"kids": [{"v": 0}], "v": 2}], "v": 3})";
  const size_t words = (v.tokens.size() + 31) / 32;
  auto masks_along = [&]() {
    GrammarMatcher m(g, v.vocab);
    std::vector<uint32_t> all, mask(words);
    for (unsigned char c : doc) {
      m.fill_mask(mask.data());
      all.insert(all.end(), mask.begin(), mask.end());
      if (!m.accept(c)) break;
    }
    return all;
  };
  std::vector<std::vector<uint32_t>> results(4);
  std::vector<std::thread> threads;
  for (auto& r : results) threads.emplace_back([&r, &masks_along] { r = masks_along(); });
  for (auto& t : threads) t.join();
  // A fresh grammar, so its cache is cold, walked by one thread.
  const auto reference_grammar = must(grammar_from_json_schema(kS3));
  GrammarMatcher ref(reference_grammar, v.vocab);
  std::vector<uint32_t> expected, mask(words);
  for (unsigned char c : doc) {
    ref.fill_mask(mask.data());
    expected.insert(expected.end(), mask.begin(), mask.end());
    ASSERT_TRUE(ref.accept(c));
  }
  for (const auto& r : results) EXPECT_EQ(r, expected);
}

}  // namespace
}  // namespace mx
