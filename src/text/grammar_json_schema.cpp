// JSON schema to grammar IR.
//
// Output format: compact JSON with at most one optional space after ':' and ',' and no other
// whitespace (no newlines, indentation, leading or trailing space). A weak model that is free
// to emit whitespace tends to pad forever; this leaves it one choice it commonly makes and no
// room to wander. Object members come in the order of `properties` (ordered_json keeps the
// schema's order), required ones always, optional ones may be left out. Strings are
// valid UTF-8 with JSON escapes and no raw control characters. Schemas are inlined where they
// are used; only $ref targets become rules (so recursion works), and unconstrained values nest
// through one rule per level up to kMaxJsonDepth.
//
// Keywords: annotations (title, description, default, examples, $schema, $id, $comment,
// format, strict, readOnly, writeOnly, deprecated) are ignored; `format` is not enforced.
// Anything else outside the supported subset fails naming the keyword.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "text/grammar_internal.h"

namespace mx::grammar {
namespace {

using json = nlohmann::ordered_json;

const std::set<std::string>& annotation_keywords() {
  static const std::set<std::string> k = {"title",   "description", "default",    "examples",
                                          "$schema", "$id",         "$comment",   "format",
                                          "strict",  "readOnly",    "writeOnly",  "deprecated",
                                          "$defs",   "definitions", "uniqueItems"};
  return k;
}

const std::set<std::string>& supported_keywords() {
  static const std::set<std::string> k = {"type",
                                          "properties",
                                          "required",
                                          "additionalProperties",
                                          "items",
                                          "prefixItems",
                                          "enum",
                                          "const",
                                          "anyOf",
                                          "oneOf",
                                          "allOf",
                                          "$ref",
                                          "minLength",
                                          "maxLength",
                                          "minItems",
                                          "maxItems",
                                          "minimum",
                                          "maximum",
                                          "exclusiveMinimum",
                                          "exclusiveMaximum",
                                          "pattern"};
  return k;
}

int32_t ws(ExprBuilder& b) { return b.opt(b.literal(" ")); }
int32_t sep(ExprBuilder& b) { return b.seq({b.literal(","), ws(b)}); }
int32_t colon(ExprBuilder& b) { return b.seq({b.literal(":"), ws(b)}); }

int32_t hex(ExprBuilder& b) {
  ByteSet s;
  s.add('0', '9');
  s.add('a', 'f');
  s.add('A', 'F');
  return b.bytes(s);
}

// \uXXXX that nlohmann (and any strict parser) accepts: no lone surrogates.
int32_t unicode_escape(ExprBuilder& b) {
  ByteSet plain_first, d_second, hi_second, lo_second;
  plain_first.add('0', '9');
  plain_first.add('a', 'c');
  plain_first.add('A', 'C');
  plain_first.add('e', 'f');
  plain_first.add('E', 'F');
  d_second.add('0', '7');
  hi_second.add('8', '9');
  hi_second.add('a', 'b');
  hi_second.add('A', 'B');
  lo_second.add('c', 'f');
  lo_second.add('C', 'F');
  ByteSet d;
  d.add('d', 'd');
  d.add('D', 'D');
  const int32_t plain = b.alt({b.seq({b.bytes(plain_first), hex(b), hex(b), hex(b)}),
                               b.seq({b.bytes(d), b.bytes(d_second), hex(b), hex(b)})});
  const int32_t pair = b.seq({b.bytes(d), b.bytes(hi_second), hex(b), hex(b), b.literal("\\u"),
                              b.bytes(d), b.bytes(lo_second), hex(b), hex(b)});
  return b.seq({b.literal("u"), b.alt({plain, pair})});
}

// One character of a JSON string body (a code point, raw or escaped).
int32_t string_char(ExprBuilder& b) {
  ByteSet plain;
  plain.add(0x20, 0x21);
  plain.add(0x23, 0x5B);
  plain.add(0x5D, 0x7F);
  ByteSet simple;
  for (char c : std::string("\"\\/bfnrt")) simple.add(c, c);
  const int32_t escape = b.seq({b.literal("\\"), b.alt({b.bytes(simple), unicode_escape(b)})});
  return b.alt({b.bytes(plain), utf8_range_expr(b, 0x80, 0x10FFFF), escape});
}

int32_t string_expr(ExprBuilder& b, int32_t min, int32_t max) {
  return b.seq({b.literal("\""), b.repeat(string_char(b), min, max), b.literal("\"")});
}

int32_t digits(ExprBuilder& b, int32_t min, int32_t max) {
  return b.repeat(b.range('0', '9'), min, max);
}

// max_int_digits 0: any number of integer digits.
int32_t number_expr(ExprBuilder& b, bool minus, bool plus, int32_t max_int_digits) {
  const int32_t int_part =
      b.alt({b.literal("0"), b.seq({b.range('1', '9'), digits(b, 0, max_int_digits - 1)})});
  ByteSet e, sign;
  e.add('e', 'e');
  e.add('E', 'E');
  sign.add('+', '+');
  sign.add('-', '-');
  const int32_t frac = b.opt(b.seq({b.literal("."), digits(b, 1, -1)}));
  const int32_t exp = b.opt(b.seq({b.bytes(e), b.opt(b.bytes(sign)), digits(b, 1, -1)}));
  std::vector<int32_t> signs;
  if (plus) signs.push_back(b.empty());
  if (minus) signs.push_back(b.literal("-"));
  return b.seq({b.alt(std::move(signs)), int_part, frac, exp});
}

// Decimal text of the integers in [lo, hi] of one digit count (canonical: no leading zero
// unless the number is 0), by the usual digit-by-digit split.
int32_t same_length_range(ExprBuilder& b, const std::string& lo, const std::string& hi) {
  if (lo.empty()) return b.empty();
  if (lo[0] == hi[0]) {
    return b.seq({b.literal(lo.substr(0, 1)), same_length_range(b, lo.substr(1), hi.substr(1))});
  }
  const size_t rest = lo.size() - 1;
  std::vector<int32_t> alts;
  alts.push_back(b.seq(
      {b.literal(lo.substr(0, 1)), same_length_range(b, lo.substr(1), std::string(rest, '9'))}));
  if (lo[0] + 1 <= hi[0] - 1)
    alts.push_back(b.seq({b.range(lo[0] + 1, hi[0] - 1), digits(b, rest, rest)}));
  alts.push_back(b.seq(
      {b.literal(hi.substr(0, 1)), same_length_range(b, std::string(rest, '0'), hi.substr(1))}));
  return b.alt(std::move(alts));
}

// The integers in [lo, hi], 0 <= lo; hi < 0 is unbounded.
int32_t nonneg_range(ExprBuilder& b, int64_t lo, int64_t hi) {
  const std::string a = std::to_string(lo);
  std::vector<int32_t> alts;
  if (hi < 0) {
    alts.push_back(same_length_range(b, a, std::string(a.size(), '9')));
    alts.push_back(b.seq({b.range('1', '9'), digits(b, static_cast<int32_t>(a.size()), -1)}));
    return b.alt(std::move(alts));
  }
  const std::string z = std::to_string(hi);
  if (a.size() == z.size()) return same_length_range(b, a, z);
  alts.push_back(same_length_range(b, a, std::string(a.size(), '9')));
  for (size_t len = a.size() + 1; len < z.size(); ++len) {
    alts.push_back(b.seq({b.range('1', '9'), digits(b, static_cast<int32_t>(len - 1),
                                                    static_cast<int32_t>(len - 1))}));
  }
  alts.push_back(same_length_range(b, "1" + std::string(z.size() - 1, '0'), z));
  return b.alt(std::move(alts));
}

// Bounds past this magnitude are treated as absent (int64 arithmetic stays exact).
constexpr double kMaxIntBound = 1e18;

class SchemaCompiler {
 public:
  SchemaCompiler(ExprBuilder& b, const json& root) : b_(b), root_(root), id_(b.schemas++) {}

  Result<int32_t> compile(const json& s, int depth, const std::string& path) {
    if (depth > kMaxSchemaDepth) {
      return invalid_argument(path + ": schema nested deeper than " +
                              std::to_string(kMaxSchemaDepth));
    }
    MX_RETURN_IF_ERROR(b_.status());
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_json_value_expr(b_);
      return invalid_argument(path + ": schema 'false' admits no value");
    }
    if (!s.is_object()) return invalid_argument(path + ": a schema must be an object");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!annotation_keywords().count(it.key()) && !supported_keywords().count(it.key())) {
        return invalid_argument(path + ": unsupported keyword '" + it.key() + "'");
      }
    }
    if (s.contains("uniqueItems") && s["uniqueItems"] != false) {
      return invalid_argument(path + ": unsupported keyword 'uniqueItems' (true)");
    }
    if (s.contains("$ref")) return compile_ref(s, depth, path);
    if (s.contains("enum") || s.contains("const")) return literals(s, path);
    for (const char* key : {"anyOf", "oneOf", "allOf"}) {
      if (s.contains(key)) return compile_alternatives(s, key, depth, path);
    }
    return compile_typed(s, depth, path);
  }

 private:
  Status only_annotations_beside(const json& s, const std::string& key, const std::string& path) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() != key && !annotation_keywords().count(it.key())) {
        return invalid_argument(path + ": keyword '" + it.key() + "' beside '" + key +
                                "' is not supported");
      }
    }
    return Status::ok();
  }

  Result<int32_t> compile_ref(const json& s, int depth, const std::string& path) {
    MX_RETURN_IF_ERROR(only_annotations_beside(s, "$ref", path));
    if (!s["$ref"].is_string()) return invalid_argument(path + ": '$ref' must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (ref.empty() || ref[0] != '#') {
      return invalid_argument(path + ": remote $ref '" + ref + "' is not supported");
    }
    const std::string key = "schema" + std::to_string(id_) + ref;
    if (auto it = b_.memo.find(key); it != b_.memo.end()) return b_.ref(it->second);
    const json* target = nullptr;
    try {
      const json::json_pointer ptr(ref.substr(1));
      if (root_.contains(ptr)) target = &root_.at(ptr);
    } catch (const json::exception&) {
      return invalid_argument(path + ": bad $ref '" + ref + "'");
    }
    if (target == nullptr) return invalid_argument(path + ": $ref '" + ref + "' not found");
    const int32_t rule = b_.new_rule("$ref " + ref);
    MX_RETURN_IF_ERROR(b_.status());
    b_.memo[key] = rule;
    MX_ASSIGN_OR_RETURN(const int32_t body, compile(*target, depth + 1, ref));
    b_.set_body(rule, body);
    return b_.ref(rule);
  }

  Result<int32_t> literals(const json& s, const std::string& path) {
    std::vector<int32_t> alts;
    if (s.contains("const")) alts.push_back(b_.literal(s["const"].dump()));
    if (s.contains("enum")) {
      if (!s["enum"].is_array() || s["enum"].empty()) {
        return invalid_argument(path + ": 'enum' must be a non-empty array");
      }
      if (s.contains("const")) return invalid_argument(path + ": both 'enum' and 'const'");
      for (const json& v : s["enum"]) alts.push_back(b_.literal(v.dump()));
    }
    return b_.alt(std::move(alts));
  }

  Result<int32_t> compile_alternatives(const json& s, const char* key, int depth,
                                       const std::string& path) {
    MX_RETURN_IF_ERROR(only_annotations_beside(s, key, path));
    const json& list = s[key];
    if (!list.is_array() || list.empty()) {
      return invalid_argument(path + ": '" + key + "' must be a non-empty array");
    }
    if (std::string(key) == "allOf" && list.size() != 1) {
      return invalid_argument(path + ": unsupported keyword 'allOf' (more than one schema)");
    }
    std::vector<int32_t> alts;
    for (size_t i = 0; i < list.size(); ++i) {
      MX_ASSIGN_OR_RETURN(const int32_t e,
                          compile(list[i], depth + 1, path + "/" + key + "/" + std::to_string(i)));
      alts.push_back(e);
    }
    return b_.alt(std::move(alts));
  }

  Result<int32_t> compile_typed(const json& s, int depth, const std::string& path) {
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) return invalid_argument(path + ": 'type' entries must be strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return invalid_argument(path + ": 'type' must be a string or a list of strings");
      }
    } else {
      types = implied_types(s);
      if (types.empty()) return any_json_value_expr(b_);
    }
    std::vector<int32_t> alts;
    for (const std::string& t : types) {
      MX_ASSIGN_OR_RETURN(const int32_t e, compile_type(s, t, depth, path));
      alts.push_back(e);
    }
    return b_.alt(std::move(alts));
  }

  static std::vector<std::string> implied_types(const json& s) {
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      return {"object"};
    }
    if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
        s.contains("maxItems")) {
      return {"array"};
    }
    if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) {
      return {"string"};
    }
    if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
        s.contains("exclusiveMaximum")) {
      return {"number"};
    }
    return {};
  }

  Result<int32_t> compile_type(const json& s, const std::string& t, int depth,
                               const std::string& path) {
    if (t == "object") return compile_object(s, depth, path);
    if (t == "array") return compile_array(s, depth, path);
    if (t == "string") return compile_string(s, path);
    if (t == "integer") return compile_integer(s, path);
    if (t == "number") return compile_number(s, path);
    if (t == "boolean") return b_.alt({b_.literal("true"), b_.literal("false")});
    if (t == "null") return b_.literal("null");
    return invalid_argument(path + ": unknown type '" + t + "'");
  }

  Result<int32_t> compile_object(const json& s, int depth, const std::string& path);
  Result<int32_t> compile_array(const json& s, int depth, const std::string& path);
  Result<int32_t> compile_string(const json& s, const std::string& path);
  Result<int32_t> compile_integer(const json& s, const std::string& path);
  Result<int32_t> compile_number(const json& s, const std::string& path);

  ExprBuilder& b_;
  const json& root_;
  int32_t id_;
};

// A count keyword: absent gives `fallback`; otherwise a non-negative integer up to kMaxRepeat.
Result<int32_t> count_keyword(const json& s, const char* key, int32_t fallback,
                              const std::string& path) {
  if (!s.contains(key)) return fallback;
  const json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0) {
    return invalid_argument(path + ": '" + key + "' must be a non-negative integer");
  }
  if (v.get<int64_t>() > kMaxRepeat) {
    return invalid_argument(path + ": '" + key + "' " + v.dump() + " is over the limit " +
                            std::to_string(kMaxRepeat));
  }
  return static_cast<int32_t>(v.get<int64_t>());
}

Result<int32_t> SchemaCompiler::compile_object(const json& s, int depth, const std::string& path) {
  const json empty = json::object();
  const json& props = s.contains("properties") ? s["properties"] : empty;
  if (!props.is_object()) return invalid_argument(path + ": 'properties' must be an object");
  std::set<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) return invalid_argument(path + ": 'required' must be an array");
    for (const json& r : s["required"]) {
      if (!r.is_string()) return invalid_argument(path + ": 'required' entries must be strings");
      required.insert(r.get<std::string>());
    }
  }
  const json* additional =
      s.contains("additionalProperties") ? &s["additionalProperties"] : nullptr;
  if (additional && !additional->is_boolean() && !additional->is_object()) {
    return invalid_argument(path + ": 'additionalProperties' must be a boolean or a schema");
  }
  // Listed properties close the object unless extra ones are asked for explicitly.
  const bool extras = additional ? *additional != false : props.empty();
  std::vector<int32_t> members;
  std::vector<uint8_t> req;
  auto member = [&](const std::string& key, const json& schema) -> Status {
    MX_ASSIGN_OR_RETURN(const int32_t value, compile(schema, depth + 1, path + "/" + key));
    members.push_back(b_.seq({b_.literal(json(key).dump()), colon(b_), value}));
    req.push_back(required.count(key) ? 1 : 0);
    return Status::ok();
  };
  for (auto it = props.begin(); it != props.end(); ++it) {
    MX_RETURN_IF_ERROR(member(it.key(), it.value()));
  }
  const json any = json::object();
  for (const std::string& r : required) {
    if (props.contains(r)) continue;
    if (!extras) return invalid_argument(path + ": required property '" + r + "' is not allowed");
    MX_RETURN_IF_ERROR(member(r, additional && additional->is_object() ? *additional : any));
  }
  int32_t extra = -1;
  if (extras) {
    int32_t value = 0;
    if (additional && additional->is_object()) {
      MX_ASSIGN_OR_RETURN(value, compile(*additional, depth + 1, path + "/additionalProperties"));
    } else {
      value = any_json_value_expr(b_);
    }
    extra = b_.seq({string_expr(b_, 0, -1), colon(b_), value});
  }
  return b_.seq({b_.literal("{"), b_.object(std::move(members), std::move(req), extra, sep(b_)),
                 b_.literal("}")});
}

Result<int32_t> SchemaCompiler::compile_array(const json& s, int depth, const std::string& path) {
  std::vector<int32_t> prefix;
  int32_t rest = -1;
  const json* items = s.contains("items") ? &s["items"] : nullptr;
  if (s.contains("prefixItems") || (items && items->is_array())) {
    const json& list = s.contains("prefixItems") ? s["prefixItems"] : *items;
    if (!list.is_array()) return invalid_argument(path + ": 'prefixItems' must be an array");
    for (size_t i = 0; i < list.size(); ++i) {
      MX_ASSIGN_OR_RETURN(const int32_t e,
                          compile(list[i], depth + 1, path + "/" + std::to_string(i)));
      prefix.push_back(e);
    }
    if (items && items->is_array())
      items = nullptr;  // the draft-4 tuple form: nothing after
    else if (!items)
      rest = any_json_value_expr(b_);
  } else if (!items) {
    rest = any_json_value_expr(b_);
  }
  if (items && *items != false) {
    MX_ASSIGN_OR_RETURN(rest, compile(*items, depth + 1, path + "/items"));
  }
  MX_ASSIGN_OR_RETURN(const int32_t min, count_keyword(s, "minItems", 0, path));
  MX_ASSIGN_OR_RETURN(const int32_t max, count_keyword(s, "maxItems", -1, path));
  const int32_t k = static_cast<int32_t>(prefix.size());
  if ((max >= 0 && max < min) || (rest < 0 && min > k)) {
    return invalid_argument(path + ": no array length satisfies minItems/maxItems");
  }
  // tail(i): what may follow once i items are out.
  int32_t tail = b_.empty();
  if (rest >= 0 && (max < 0 || max > k)) {
    const int32_t from = std::max(k, 1);
    tail = b_.repeat(b_.seq({sep(b_), rest}), std::max(min - from, 0), max < 0 ? -1 : max - from);
  }
  for (int32_t i = k - 1; i >= 1; --i) {
    if (max >= 0 && i >= max) continue;
    const int32_t more = b_.seq({sep(b_), prefix[i], tail});
    tail = i < min ? more : b_.opt(more);
  }
  int32_t body = b_.empty();
  if (k > 0) {
    body = b_.seq({prefix[0], tail});
  } else if (rest >= 0 && max != 0) {
    body = b_.seq({rest, tail});
  }
  if (min == 0) body = b_.opt(body);
  return b_.seq({b_.literal("["), body, b_.literal("]")});
}

Result<int32_t> SchemaCompiler::compile_string(const json& s, const std::string& path) {
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) return invalid_argument(path + ": 'pattern' must be a string");
    if (s.contains("minLength") || s.contains("maxLength")) {
      return invalid_argument(path + ": 'pattern' with minLength/maxLength is not supported");
    }
    Result<int32_t> e = regex_expr(b_, s["pattern"].get<std::string>(), true);
    if (!e.is_ok()) return e.status().with_context(path + ": pattern");
    return b_.seq({b_.literal("\""), *e, b_.literal("\"")});
  }
  MX_ASSIGN_OR_RETURN(const int32_t min, count_keyword(s, "minLength", 0, path));
  MX_ASSIGN_OR_RETURN(const int32_t max, count_keyword(s, "maxLength", -1, path));
  if (max >= 0 && max < min) return invalid_argument(path + ": maxLength below minLength");
  return string_expr(b_, min, max);
}

// Reads a numeric bound; absent or past kMaxIntBound gives nullopt.
Result<std::optional<double>> bound(const json& s, const char* key, const std::string& path) {
  if (!s.contains(key)) return std::optional<double>();
  if (!s[key].is_number()) return invalid_argument(path + ": '" + key + "' must be a number");
  const double v = s[key].get<double>();
  if (std::fabs(v) > kMaxIntBound) return std::optional<double>();
  return std::optional<double>(v);
}

Result<int32_t> SchemaCompiler::compile_integer(const json& s, const std::string& path) {
  MX_ASSIGN_OR_RETURN(auto min, bound(s, "minimum", path));
  MX_ASSIGN_OR_RETURN(auto max, bound(s, "maximum", path));
  MX_ASSIGN_OR_RETURN(auto xmin, bound(s, "exclusiveMinimum", path));
  MX_ASSIGN_OR_RETURN(auto xmax, bound(s, "exclusiveMaximum", path));
  std::optional<int64_t> lo, hi;
  if (min) lo = static_cast<int64_t>(std::ceil(*min));
  if (xmin) lo = std::max(lo.value_or(INT64_MIN), static_cast<int64_t>(std::floor(*xmin)) + 1);
  if (max) hi = static_cast<int64_t>(std::floor(*max));
  if (xmax) hi = std::min(hi.value_or(INT64_MAX), static_cast<int64_t>(std::ceil(*xmax)) - 1);
  if (lo && hi && *lo > *hi) return invalid_argument(path + ": no integer satisfies the bounds");
  std::vector<int32_t> alts;
  if (!hi || *hi >= 0)
    alts.push_back(nonneg_range(b_, std::max<int64_t>(lo.value_or(0), 0), hi.value_or(-1)));
  if (!lo || *lo < 0) {
    const int64_t nlo = hi && *hi < 0 ? -*hi : 1;
    const int64_t nhi = lo ? -*lo : -1;
    alts.push_back(b_.seq({b_.literal("-"), nonneg_range(b_, nlo, nhi)}));
  }
  return b_.alt(std::move(alts));
}

// Numbers keep the sign the bounds imply and, with both bounds, the integer digits they
// allow; the exact range of a fraction is not enforced.
Result<int32_t> SchemaCompiler::compile_number(const json& s, const std::string& path) {
  MX_ASSIGN_OR_RETURN(auto min, bound(s, "minimum", path));
  MX_ASSIGN_OR_RETURN(auto max, bound(s, "maximum", path));
  MX_ASSIGN_OR_RETURN(auto xmin, bound(s, "exclusiveMinimum", path));
  MX_ASSIGN_OR_RETURN(auto xmax, bound(s, "exclusiveMaximum", path));
  if (!min) min = xmin;
  if (!max) max = xmax;
  const bool minus = !min || *min < 0;
  const bool plus = !max || *max >= 0;
  if (!minus && !plus) return invalid_argument(path + ": no number satisfies the bounds");
  int32_t int_digits = -1;
  if (min && max) {
    const double m = std::max(std::fabs(*min), std::fabs(*max));
    int_digits = static_cast<int32_t>(std::to_string(static_cast<int64_t>(m)).size());
  }
  return number_expr(b_, minus, plus, int_digits < 0 ? 0 : int_digits);
}

// The nesting rule of objects or arrays at `depth` (bodies in line at the top).
int32_t container_body(ExprBuilder& b, bool object, int depth);

int32_t value_at(ExprBuilder& b, int depth) {
  std::vector<int32_t> alts = {string_expr(b, 0, -1), number_expr(b, true, true, 0),
                               b.literal("true"), b.literal("false"), b.literal("null")};
  if (depth < kMaxJsonDepth) {
    for (bool object : {true, false}) {
      const std::string name =
          std::string(object ? "json object " : "json array ") + std::to_string(depth);
      auto it = b.memo.find(name);
      int32_t rule = it == b.memo.end() ? -1 : it->second;
      if (rule < 0) {
        rule = b.new_rule(name);
        if (rule < 0) return 0;
        b.memo[name] = rule;
        b.set_body(rule, container_body(b, object, depth));
      }
      alts.push_back(b.ref(rule));
    }
  }
  return b.alt(std::move(alts));
}

int32_t container_body(ExprBuilder& b, bool object, int depth) {
  const int32_t item = object ? b.seq({string_expr(b, 0, -1), colon(b), value_at(b, depth + 1)})
                              : value_at(b, depth + 1);
  const int32_t items = b.opt(b.seq({item, b.repeat(b.seq({sep(b), item}), 0, -1)}));
  return object ? b.seq({b.literal("{"), items, b.literal("}")})
                : b.seq({b.literal("["), items, b.literal("]")});
}

}  // namespace

Result<int32_t> json_schema_expr(ExprBuilder& b, const nlohmann::ordered_json& schema) {
  SchemaCompiler c(b, schema);
  MX_ASSIGN_OR_RETURN(const int32_t e, c.compile(schema, 0, "schema"));
  MX_RETURN_IF_ERROR(b.status());
  return e;
}

int32_t any_json_value_expr(ExprBuilder& b) {
  return b.alt({string_expr(b, 0, -1), number_expr(b, true, true, 0), b.literal("true"),
                b.literal("false"), b.literal("null"), container_body(b, true, 0),
                container_body(b, false, 0)});
}

int32_t any_json_object_expr(ExprBuilder& b) { return container_body(b, true, 0); }

}  // namespace mx::grammar
