// JSON schemas as generators write them: number ranges (digit automata, exclusive bounds,
// bounded digit counts) against arithmetic on the decimal text, the bounds zod and OpenAPI
// write, allOf merging, formats, nullable and propertyNames.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>

#include "grammar_test_util.h"

namespace mx {
namespace {

using namespace grammar_test;

// Decimal text of up to 3 + 4 digits: the double it reads as orders it exactly, so the
// oracle compares doubles.
struct NumberCase {
  std::string text;
  double value;
  bool has_point;
  bool negative_zero;
};

NumberCase random_number(std::mt19937& rng) {
  std::uniform_int_distribution<int> d(0, 9), len(0, 3), flen(0, 4), coin(0, 1);
  std::string t = coin(rng) ? "-" : "";
  const int n = len(rng);
  std::string whole = n == 0 ? "0" : std::string(1, static_cast<char>('1' + d(rng) % 9));
  for (int i = 1; i < n; ++i) whole += static_cast<char>('0' + d(rng));
  t += whole;
  const int f = flen(rng);
  if (f > 0) t += ".";
  for (int i = 0; i < f; ++i) t += static_cast<char>('0' + d(rng));
  const double v = std::stod(t);
  return {t, v, f > 0, t[0] == '-' && v == 0};
}

TEST(GrammarSchema, NumberRangesAgreeWithArithmetic) {
  const double ends[] = {-120.5, -12, -3.25, -1, -0.05, 0, 0.25, 0.5, 1, 7.125, 10, 99.99, 250};
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, 13), coin(0, 1);
  int checked = 0;
  for (int c = 0; c < 300; ++c) {
    const bool integer = coin(rng);
    json s = {{"type", integer ? "integer" : "number"}};
    const int a = pick(rng), z = pick(rng);  // 13: no bound
    std::optional<double> lo, hi;
    bool lo_x = coin(rng), hi_x = coin(rng);
    if (a < 13) {
      lo = ends[a];
      s[lo_x ? "exclusiveMinimum" : "minimum"] = *lo;
    }
    if (z < 13) {
      hi = ends[z];
      s[hi_x ? "exclusiveMaximum" : "maximum"] = *hi;
    }
    auto in = [&](double v) {
      return (!lo || (lo_x ? v > *lo : v >= *lo)) && (!hi || (hi_x ? v < *hi : v <= *hi));
    };
    auto r = grammar_from_json_schema(s);
    bool any = false;
    for (double v = -130; v <= 260; v += 0.0625)
      any = any || (in(v) && (!integer || v == std::floor(v)));
    if (!r.is_ok()) {
      EXPECT_FALSE(any) << s.dump() << ": " << r.status().to_string();
      continue;
    }
    for (int k = 0; k < 60; ++k) {
      const NumberCase n = random_number(rng);
      if (n.negative_zero) continue;
      const bool want = in(n.value) && !(integer && n.has_point);
      EXPECT_EQ(feed(*r, n.text) == Verdict::kComplete, want) << s.dump() << " " << n.text;
      ++checked;
    }
    // The bounds themselves, written plainly.
    for (const auto& e : {lo, hi}) {
      if (!e) continue;
      json v = *e;
      const std::string text = v.dump();
      if (integer && text.find('.') != std::string::npos) continue;
      EXPECT_EQ(feed(*r, text) == Verdict::kComplete, in(*e)) << s.dump() << " " << text;
    }
  }
  EXPECT_GT(checked, 5000);
}

TEST(GrammarSchema, AllOfMergesAndFormatsHold) {
  const json merged = json::parse(R"({"$defs":{"Base":{"type":"object","properties":{
    "id":{"type":"integer","minimum":0}},"required":["id"]}},
    "allOf":[{"$ref":"#/$defs/Base"},{"properties":{"id":{"maximum":9},"tag":{"type":"string"}},
             "required":["tag"]}]})");
  EXPECT_EQ(feed_schema(merged, R"({"id": 5, "tag": "x"})"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(merged, R"({"id": 10, "tag": "x"})"), Verdict::kReject);  // both bounds
  EXPECT_NE(feed_schema(merged, R"({"id": 5})"), Verdict::kComplete);             // tag required
  expect_error(json::parse(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"), "types");
  const json date = {{"type", "string"}, {"format", "date"}};
  EXPECT_EQ(feed_schema(date, "\"2026-12-05\""), Verdict::kComplete);
  EXPECT_EQ(feed_schema(date, "\"2026-13-05\""), Verdict::kReject);
  const json ip = {{"type", "string"}, {"format", "ipv4"}};
  EXPECT_EQ(feed_schema(ip, "\"10.0.255.1\""), Verdict::kComplete);
  EXPECT_EQ(feed_schema(ip, "\"256.0.0.1\""), Verdict::kReject);
  const json nullable = {{"type", "integer"}, {"nullable", true}};
  EXPECT_EQ(feed_schema(nullable, "null"), Verdict::kComplete);
  const json url = {{"type", "string"}, {"format", "uri"}, {"maxLength", 2083}};
  EXPECT_EQ(feed_schema(url, "\"https://example.com/a/b?q=1\""), Verdict::kComplete);
  expect_error({{"type", "string"}, {"format", "uri"}, {"maxLength", 20}}, "maxLength");
  const json names = json::parse(
      R"({"type":"object","propertyNames":{"pattern":"^[a-z]+$"},"additionalProperties":true})");
  EXPECT_EQ(feed_schema(names, R"({"ab": 1})"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(names, R"({"A")"), Verdict::kReject);
}

TEST(GrammarSchema, GeneratorBoundsCompileSmall) {
  // Zod 4 writes these for every z.number().int(); OpenAPI 3.0 writes boolean exclusives.
  const json safe = {
      {"type", "integer"}, {"minimum", -9007199254740991LL}, {"maximum", 9007199254740991LL}};
  EXPECT_EQ(feed_schema(safe, "9007199254740991"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(safe, "-9007199254740991"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(safe, "9007199254740992"), Verdict::kReject);
  EXPECT_EQ(feed_schema(safe, "0"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(safe, "-0"), Verdict::kReject);
  const json oa = {{"type", "number"}, {"minimum", 0}, {"exclusiveMinimum", true}};
  EXPECT_NE(feed_schema(oa, "0"), Verdict::kComplete);
  EXPECT_NE(feed_schema(oa, "0.000"), Verdict::kComplete);
  EXPECT_EQ(feed_schema(oa, "0.001"), Verdict::kComplete);
  const json huge = {{"type", "number"}, {"maximum", 1e300}};
  EXPECT_EQ(feed_schema(huge, "-5.5e3"), Verdict::kComplete);  // a dropped bound keeps exponents
}

}  // namespace
}  // namespace mx
