// Values of the Jinja subset that chat templates use. Arrays, objects and namespaces have
// reference semantics as in Python; objects keep insertion order (tojson prints keys in the
// order the request gave them).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mx::jinja {

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;
using Kwargs = std::vector<std::pair<std::string, Value>>;
using Function = std::function<Result<Value>(std::vector<Value>& args, Kwargs& kwargs)>;

struct Value {
  enum class Kind {
    kUndefined,
    kNull,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kNamespace,
    kFunction
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<Array> a;
  std::shared_ptr<Object> o;  // objects and namespaces
  std::shared_ptr<Function> fn;

  static Value undefined() { return {}; }
  static Value null();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value floating(double v);
  static Value string(std::string v);
  static Value array(Array v = {});
  static Value object(Object v = {});
  static Value namespace_(Object v = {});
  static Value function(Function fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNull; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  bool is_array() const { return kind == Kind::kArray; }
  bool is_mapping() const { return kind == Kind::kObject || kind == Kind::kNamespace; }
  double as_double() const { return kind == Kind::kInt ? static_cast<double>(i) : f; }

  bool truthy() const;
  // Output text of {{ value }}, as the reference renderer prints it.
  std::string to_string() const;
  // Member lookup for objects and namespaces; undefined when absent.
  Value get(const std::string& key) const;
  void set(const std::string& key, Value v);
};

bool values_equal(const Value& a, const Value& b);

struct JsonOptions {
  int indent = -1;  // < 0: one line with ", " and ": "
};
std::string to_json(const Value& v, const JsonOptions& opt = {}, int depth = 0);

Value from_json(const nlohmann::ordered_json& j);

}  // namespace mx::jinja
