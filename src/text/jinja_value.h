// Values of the Jinja subset that chat templates use. Arrays, objects and namespaces have
// reference semantics as in Python; objects keep insertion order (tojson prints keys in the
// order the request gave them). Arrays and objects never change once built (a for loop's
// `loop` aside, whose members come from the list it walks); namespaces do, and never hold a
// namespace, so values cannot form cycles and their depth stays known.
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

// Values nest at most this deep (request JSON included), so printing, comparing and freeing
// them, all recursive, stay within a thread's stack.
constexpr int kMaxValueDepth = 256;

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
  // Set by the container factories. A namespace counts as depth 1 wherever it sits: its own
  // content is held under kMaxValueDepth when assigned, so a container holding namespaces is at
  // most that much deeper than `depth` says.
  bool holds_namespace = false;  // is or contains a namespace
  int32_t depth = 0;             // containers nested inside this one; 0 for scalars
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
  // Fails when `v` would break the invariants above (a namespace inside a namespace, or a
  // value too deep).
  Status set(const std::string& key, Value v);
};

bool values_equal(const Value& a, const Value& b);

struct JsonOptions {
  int indent = -1;  // < 0: one line with ", " and ": "
  size_t max_bytes = SIZE_MAX;
};
std::string to_json(const Value& v, const JsonOptions& opt = {});
// Appends to `out`; false once `out` would pass opt.max_bytes (what was written stays).
bool append_json(const Value& v, const JsonOptions& opt, std::string* out);

// Fails on JSON nested deeper than kMaxValueDepth.
Result<Value> from_json(const nlohmann::ordered_json& j);

}  // namespace mx::jinja
