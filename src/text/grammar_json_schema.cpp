// JSON schema to grammar IR.
//
// Output format: compact JSON with at most one optional space after ':' and ',' and no other
// whitespace (no newlines, indentation, leading or trailing space). A weak model that is free
// to emit whitespace tends to pad forever; this leaves it one choice it commonly makes and no
// room to wander. Object members come in the order of `properties` (ordered_json keeps the
// schema's order), required ones always, optional ones may be left out. Strings are
// valid UTF-8 with JSON escapes and no raw control characters. Schemas are inlined where they
// are used; only $ref targets become rules (so recursion works), and unconstrained values nest
// through two shared recursive rules (objects, arrays), as deep as the output goes.
//
// Keywords: annotations (title, description, default, examples, $schema, $id, $comment,
// strict, readOnly, writeOnly, deprecated, OpenAPI's example, discriminator and x-...) are
// ignored; `format` is enforced for the formats format_regex() knows and an annotation
// otherwise. Numbers are grammar_numbers.cpp's, allOf is merged by grammar_schema_merge.cpp.
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
  // $defs, definitions and OpenAPI's components hold the targets of $refs.
  static const std::set<std::string> k = {
      "title",        "description", "default",         "examples",        "$schema",
      "$id",          "$comment",    "format",          "strict",          "readOnly",
      "writeOnly",    "deprecated",  "$defs",           "definitions",     "components",
      "uniqueItems",  "example",     "nullable",        "discriminator",   "$anchor",
      "externalDocs", "xml",         "contentEncoding", "contentMediaType"};
  return k;
}

// OpenAPI's vendor extensions (x-...) annotate like the keywords above.
bool is_annotation(const std::string& key) {
  return annotation_keywords().count(key) || key.rfind("x-", 0) == 0;
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
                                          "pattern",
                                          "propertyNames"};
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
      if (!is_annotation(it.key()) && !supported_keywords().count(it.key())) {
        return invalid_argument(path + ": unsupported keyword '" + it.key() + "'");
      }
    }
    if (s.contains("uniqueItems") && s["uniqueItems"] != false) {
      return invalid_argument(path + ": unsupported keyword 'uniqueItems' (true)");
    }
    if (s.contains("nullable") && s["nullable"] == true) {
      json inner = s;
      inner.erase("nullable");
      MX_ASSIGN_OR_RETURN(const int32_t e, compile(inner, depth + 1, path));
      return b_.alt({e, b_.literal("null")});
    }
    if (s.contains("allOf") && s["allOf"].is_array() && s["allOf"].size() > 1) {
      MX_ASSIGN_OR_RETURN(const json merged, merge_all_of(root_, s, depth, path));
      return compile(merged, depth + 1, path + "/allOf");
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
      if (it.key() != key && !is_annotation(it.key())) {
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
  Status lengths_implied(const json& s, int32_t pattern, const std::string& path);
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
    int32_t key = 0;
    if (s.contains("propertyNames")) {
      json names = s["propertyNames"];
      if (names.is_object() && !names.contains("type")) names["type"] = "string";
      MX_ASSIGN_OR_RETURN(key, compile(names, depth + 1, path + "/propertyNames"));
    } else {
      key = string_expr(b_, 0, -1);
    }
    extra = b_.seq({key, colon(b_), value});
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

// The formats enforced, as regexes within what ajv-formats accepts (RFC 3339 date and time
// with a zone, RFC 5321 dot-atom mail addresses, RFC 4122 UUIDs, absolute URIs). Others are
// annotations, as the JSON Schema specification makes them by default.
const char* format_regex(const std::string& format) {
  static const std::pair<const char*, const char*> k[] = {
      {"date", R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8]))"},
      {"time", R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"date-time",
       R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|1\d|2[0-8])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,6})?)"
       R"((Z|[+-]([01]\d|2[0-3]):[0-5]\d))"},
      {"email",
       R"([A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,})"},
      {"uuid", R"([0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})"},
      {"uri",
       R"((https?|ftp|file)://[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?){0,4})"
       R"((:\d{1,5})?(/[A-Za-z0-9._~!$&'()*+,;=:@-]{0,32}){0,6}(\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]{0,128})?)"},
      {"ipv4", R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"},
  };
  for (const auto& [name, re] : k) {
    if (format == name) return re;
  }
  return nullptr;
}

// minLength/maxLength beside a pattern or format hold when every text the pattern admits is
// within them (pydantic bounds its URLs to 2083 characters, say); other combinations would
// need the intersection of two languages and are refused.
Status SchemaCompiler::lengths_implied(const json& s, int32_t pattern, const std::string& path) {
  if (!s.contains("minLength") && !s.contains("maxLength")) return Status::ok();
  MX_ASSIGN_OR_RETURN(const int32_t min, count_keyword(s, "minLength", 0, path));
  MX_ASSIGN_OR_RETURN(const int32_t max, count_keyword(s, "maxLength", -1, path));
  const auto [lo, hi] = char_length_range(b_, pattern);
  if (lo >= min && (max < 0 || (hi >= 0 && hi <= max))) return Status::ok();
  return invalid_argument(path +
                          ": minLength/maxLength with a pattern or format whose texts "
                          "are not all within them is not supported");
}

Result<int32_t> SchemaCompiler::compile_string(const json& s, const std::string& path) {
  const char* format = nullptr;
  if (s.contains("format") && s["format"].is_string()) {
    format = format_regex(s["format"].get<std::string>());
  }
  if (s.contains("pattern") || format) {
    if (s.contains("pattern") && !s["pattern"].is_string()) {
      return invalid_argument(path + ": 'pattern' must be a string");
    }
    // A pattern beside a format (zod writes both) is the stricter of the two.
    Result<int32_t> e = s.contains("pattern")
                            ? regex_expr(b_, s["pattern"].get<std::string>(), true)
                            : regex_expr(b_, format, true);
    if (!e.is_ok()) return e.status().with_context(path + ": pattern");
    MX_RETURN_IF_ERROR(lengths_implied(s, *e, path));
    return b_.seq({b_.literal("\""), *e, b_.literal("\"")});
  }
  MX_ASSIGN_OR_RETURN(const int32_t min, count_keyword(s, "minLength", 0, path));
  MX_ASSIGN_OR_RETURN(const int32_t max, count_keyword(s, "maxLength", -1, path));
  if (max >= 0 && max < min) return invalid_argument(path + ": maxLength below minLength");
  return string_expr(b_, min, max);
}

// Reads minimum/maximum and their exclusive forms (draft 2020-12 numbers, and draft 4's and
// OpenAPI 3.0's booleans that make minimum/maximum exclusive), keeping the tighter bound.
// Bounds past the digit count a number may have anyway are dropped.
Result<NumberBounds> read_bounds(const json& s, const std::string& path) {
  NumberBounds r;
  for (const bool upper : {false, true}) {
    const char* key = upper ? "maximum" : "minimum";
    const char* xkey = upper ? "exclusiveMaximum" : "exclusiveMinimum";
    std::optional<double> v;
    bool strict = false;
    if (s.contains(key)) {
      if (!s[key].is_number()) return invalid_argument(path + ": '" + key + "' must be a number");
      v = s[key].get<double>();
    }
    if (s.contains(xkey)) {
      const json& x = s[xkey];
      if (x.is_boolean()) {
        strict = x.get<bool>() && v.has_value();
      } else if (x.is_number()) {
        const double xv = x.get<double>();
        if (!v || (upper ? xv <= *v : xv >= *v)) {
          v = xv;
          strict = true;
        }
      } else {
        return invalid_argument(path + ": '" + xkey + "' must be a number");
      }
    }
    if (v && !(std::fabs(*v) < 1e16)) v.reset();
    // OpenAPI's int32 is a range too (ajv-formats checks it); int64 holds any 16-digit value.
    if (s.contains("format") && s["format"] == "int32") {
      const double end = upper ? 2147483647.0 : -2147483648.0;
      if (!v || (upper ? end < *v : end > *v)) {
        v = end;
        strict = false;
      }
    }
    (upper ? r.hi : r.lo) = v;
    (upper ? r.hi_strict : r.lo_strict) = strict;
  }
  return r;
}

Result<int32_t> SchemaCompiler::compile_integer(const json& s, const std::string& path) {
  MX_ASSIGN_OR_RETURN(const NumberBounds r, read_bounds(s, path));
  return number_range_expr(b_, r, true, path);
}

Result<int32_t> SchemaCompiler::compile_number(const json& s, const std::string& path) {
  MX_ASSIGN_OR_RETURN(const NumberBounds r, read_bounds(s, path));
  return number_range_expr(b_, r, false, path);
}

// An object or an array, whose members are any JSON values.
int32_t container_body(ExprBuilder& b, bool object);

// Nested containers are calls of two shared recursive rules, so every nesting level has the
// same positions and one set of masks serves them all.
int32_t any_value(ExprBuilder& b) {
  std::vector<int32_t> alts = {string_expr(b, 0, -1), any_number_expr(b), b.literal("true"),
                               b.literal("false"), b.literal("null")};
  for (bool object : {true, false}) {
    const std::string name = object ? "json object" : "json array";
    auto it = b.memo.find(name);
    int32_t rule = it == b.memo.end() ? -1 : it->second;
    if (rule < 0) {
      rule = b.new_rule(name);
      if (rule < 0) return 0;
      b.memo[name] = rule;
      b.set_body(rule, container_body(b, object));
    }
    alts.push_back(b.ref(rule));
  }
  return b.alt(std::move(alts));
}

int32_t container_body(ExprBuilder& b, bool object) {
  const int32_t item =
      object ? b.seq({string_expr(b, 0, -1), colon(b), any_value(b)}) : any_value(b);
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
  return b.alt({string_expr(b, 0, -1), any_number_expr(b), b.literal("true"), b.literal("false"),
                b.literal("null"), container_body(b, true), container_body(b, false)});
}

int32_t any_json_object_expr(ExprBuilder& b) { return container_body(b, true); }

}  // namespace mx::grammar
