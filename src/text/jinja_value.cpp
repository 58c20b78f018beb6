#include "text/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mx::jinja {

Value Value::null() {
  Value v;
  v.kind = Kind::kNull;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::integer(int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::floating(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::string(std::string x) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(x);
  return v;
}
namespace {
void add_child(const Value& child, Value* parent) {
  parent->holds_namespace |= child.holds_namespace;
  const int32_t d = child.kind == Value::Kind::kNamespace ? 1 : child.depth;
  parent->depth = std::max(parent->depth, d + 1);
}
}  // namespace

Value Value::array(Array x) {
  Value v;
  v.kind = Kind::kArray;
  v.depth = 1;
  for (const Value& e : x) add_child(e, &v);
  v.a = std::make_shared<Array>(std::move(x));
  return v;
}
Value Value::object(Object x) {
  Value v;
  v.kind = Kind::kObject;
  v.depth = 1;
  for (const auto& [k, e] : x) add_child(e, &v);
  v.o = std::make_shared<Object>(std::move(x));
  return v;
}
Value Value::namespace_(Object x) {
  Value v = object(std::move(x));
  v.kind = Kind::kNamespace;
  v.holds_namespace = true;
  return v;
}
Value Value::function(Function fn) {
  Value v;
  v.kind = Kind::kFunction;
  v.fn = std::make_shared<Function>(std::move(fn));
  return v;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined:
    case Kind::kNull:
      return false;
    case Kind::kBool:
      return b;
    case Kind::kInt:
      return i != 0;
    case Kind::kFloat:
      return f != 0;
    case Kind::kString:
      return !s.empty();
    case Kind::kArray:
      return !a->empty();
    case Kind::kObject:
      return !o->empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

namespace {
// JavaScript's Number.prototype.toString for the doubles templates meet.
std::string js_number(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof(buf), "%.*g", prec, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  return buf;
}
}  // namespace

std::string Value::to_string() const {
  switch (kind) {
    case Kind::kUndefined:
      return "";
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return b ? "true" : "false";
    case Kind::kInt:
      return std::to_string(i);
    case Kind::kFloat:
      if (f == 0 && std::signbit(f)) return "-0.0";
      if (std::fmod(f, 1.0) == 0 && std::fabs(f) < 1e21) {
        char buf[64];
        std::snprintf(buf, sizeof(buf), "%.1f", f);
        return buf;
      }
      return js_number(f);
    case Kind::kString:
      return s;
    case Kind::kArray:
    case Kind::kObject:
    case Kind::kNamespace:
      return to_json(*this);
    case Kind::kFunction:
      return "[function]";
  }
  return "";
}

Value Value::get(const std::string& key) const {
  if (!is_mapping()) return undefined();
  for (const auto& [k, v] : *o) {
    if (k == key) return v;
  }
  return undefined();
}

Status Value::set(const std::string& key, Value v) {
  if (v.holds_namespace) {
    return invalid_argument("chat template: a namespace cannot hold a namespace (attribute '" +
                            key + "')");
  }
  if (v.depth + 1 > kMaxValueDepth) {
    return invalid_argument("chat template: value depth limit: '" + key +
                            "' would nest deeper than " + std::to_string(kMaxValueDepth) +
                            " levels");
  }
  for (auto& [k, old] : *o) {
    if (k == key) {
      old = std::move(v);
      return Status::ok();
    }
  }
  o->emplace_back(key, std::move(v));
  return Status::ok();
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNull:
      return true;
    case Value::Kind::kBool:
      return a.b == b.b;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kArray:
      if (a.a->size() != b.a->size()) return false;
      for (size_t i = 0; i < a.a->size(); ++i) {
        if (!values_equal((*a.a)[i], (*b.a)[i])) return false;
      }
      return true;
    default:
      return a.o == b.o && a.fn == b.fn;
  }
}

namespace {
// Bytes append_json_string writes for `s`.
size_t json_string_size(const std::string& s) {
  size_t n = 2;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t')
      n += 2;
    else
      n += c < 0x20 ? 6 : 1;
  }
  return n;
}

// JSON.stringify of a string: quotes, backslash and control characters escaped, the rest
// (non-ASCII included) verbatim.
void append_json_string(const std::string& s, std::string* out) {
  *out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          *out += ch;
        }
    }
  }
  *out += '"';
}

// One writer for both layouts; `out` grows in place, as building each child's text and then
// copying it up would cost the depth times the size. The budget is checked before anything
// that can be large (strings, padding), so a huge indent fails without being allocated.
class JsonWriter {
 public:
  JsonWriter(const JsonOptions& opt, std::string* out) : opt_(opt), out_(out) {}

  bool write(const Value& v, int depth) {
    switch (v.kind) {
      case Value::Kind::kUndefined:
      case Value::Kind::kNull:
      case Value::Kind::kFunction:
        return put("null");
      case Value::Kind::kBool:
        return put(v.b ? "true" : "false");
      case Value::Kind::kInt:
        return put(std::to_string(v.i));
      case Value::Kind::kFloat:
        return put(js_number(v.f));
      case Value::Kind::kString:
        if (!fits(json_string_size(v.s))) return false;
        append_json_string(v.s, out_);
        return true;
      case Value::Kind::kArray: {
        if (!put("[")) return false;
        for (size_t i = 0; i < v.a->size(); ++i) {
          if (!separate(i == 0, depth + 1) || !write((*v.a)[i], depth + 1)) return false;
        }
        if (!v.a->empty() && !newline(depth)) return false;
        return put("]");
      }
      case Value::Kind::kObject:
      case Value::Kind::kNamespace: {
        if (!put("{")) return false;
        bool first = true;
        for (const auto& [k, x] : *v.o) {
          if (!separate(first, depth + 1) || !fits(json_string_size(k) + 2)) return false;
          first = false;
          append_json_string(k, out_);
          *out_ += ": ";
          if (!write(x, depth + 1)) return false;
        }
        if (!v.o->empty() && !newline(depth)) return false;
        return put("}");
      }
    }
    return put("null");
  }

 private:
  bool indented() const { return opt_.indent > 0; }
  bool fits(size_t more) const {
    return out_->size() <= opt_.max_bytes && more <= opt_.max_bytes - out_->size();
  }
  bool put(const std::string& s) {
    if (!fits(s.size())) return false;
    *out_ += s;
    return true;
  }
  bool newline(int depth) {
    if (!indented()) return true;
    const size_t pad = static_cast<size_t>(opt_.indent);
    if (!fits(1 + pad * static_cast<size_t>(depth))) return false;
    *out_ += '\n';
    out_->append(pad * static_cast<size_t>(depth), ' ');
    return true;
  }
  bool separate(bool first, int depth) {
    if (!first && !put(indented() ? "," : ", ")) return false;
    return newline(depth);
  }

  const JsonOptions& opt_;
  std::string* out_;
};

}  // namespace

bool append_json(const Value& v, const JsonOptions& opt, std::string* out) {
  return JsonWriter(opt, out).write(v, 0);
}

std::string to_json(const Value& v, const JsonOptions& opt) {
  std::string out;
  append_json(v, opt, &out);
  return out;
}

namespace {
Value scalar_from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::null();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float: {
      // JSON has one number type: integral values are integers, as in JavaScript.
      const double d = j.get<double>();
      if (std::fmod(d, 1.0) == 0 && std::fabs(d) < 9e15)
        return Value::integer(static_cast<int64_t>(d));
      return Value::floating(d);
    }
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    default:
      return Value::undefined();
  }
}

Result<Value> from_json_at(const nlohmann::ordered_json& j, int depth) {
  if ((j.is_array() || j.is_object()) && depth >= kMaxValueDepth) {
    return invalid_argument("chat template: value depth limit: the input nests deeper than " +
                            std::to_string(kMaxValueDepth) + " levels");
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      a.reserve(j.size());
      for (const auto& e : j) {
        MX_ASSIGN_OR_RETURN(Value v, from_json_at(e, depth + 1));
        a.push_back(std::move(v));
      }
      return Value::array(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      o.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        MX_ASSIGN_OR_RETURN(Value v, from_json_at(it.value(), depth + 1));
        o.emplace_back(it.key(), std::move(v));
      }
      return Value::object(std::move(o));
    }
    default:
      return scalar_from_json(j);
  }
}
}  // namespace

Result<Value> from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

}  // namespace mx::jinja
