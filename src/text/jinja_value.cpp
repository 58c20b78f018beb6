#include "text/jinja_value.h"

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
Value Value::array(Array x) {
  Value v;
  v.kind = Kind::kArray;
  v.a = std::make_shared<Array>(std::move(x));
  return v;
}
Value Value::object(Object x) {
  Value v;
  v.kind = Kind::kObject;
  v.o = std::make_shared<Object>(std::move(x));
  return v;
}
Value Value::namespace_(Object x) {
  Value v = object(std::move(x));
  v.kind = Kind::kNamespace;
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

void Value::set(const std::string& key, Value v) {
  for (auto& [k, old] : *o) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  o->emplace_back(key, std::move(v));
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
// JSON.stringify of a string: quotes, backslash and control characters escaped, the rest
// (non-ASCII included) verbatim.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}
}  // namespace

std::string to_json(const Value& v, const JsonOptions& opt, int depth) {
  const bool ind = opt.indent > 0;
  const std::string item_sep = ind ? "," : ", ";
  const std::string pad(ind ? static_cast<size_t>(opt.indent) : 0, ' ');
  std::string base = "\n", child;
  for (int d = 0; d < depth; ++d) base += pad;
  child = base + pad;
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNull:
      return "null";
    case Value::Kind::kBool:
      return v.b ? "true" : "false";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return js_number(v.f);
    case Value::Kind::kString:
      return json_string(v.s);
    case Value::Kind::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < v.a->size(); ++i) {
        if (i) out += item_sep;
        if (ind) out += child;
        out += to_json((*v.a)[i], opt, depth + 1);
      }
      if (ind && !v.a->empty()) out += base;
      return out + "]";
    }
    case Value::Kind::kObject:
    case Value::Kind::kNamespace: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : *v.o) {
        if (!first) out += item_sep;
        first = false;
        if (ind) out += child;
        out += json_string(k) + ": " + to_json(x, opt, depth + 1);
      }
      if (ind && !v.o->empty()) out += base;
      return out + "}";
    }
    case Value::Kind::kFunction:
      return "null";
  }
  return "null";
}

Value from_json(const nlohmann::ordered_json& j) {
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
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(from_json(e));
      return Value::array(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it)
        o.emplace_back(it.key(), from_json(it.value()));
      return Value::object(std::move(o));
    }
    default:
      return Value::undefined();
  }
}

}  // namespace mx::jinja
