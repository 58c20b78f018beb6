// What the template interpreter calls that is not evaluation itself: the render's budget, and
// filters, tests, string methods, member lookup and the global functions. Internal to the
// template engine.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "text/chat_template.h"
#include "text/jinja_value.h"

namespace mx::jinja {

// "chat template: <message>", the prefix every template error carries.
Status error(const std::string& message);

// String bytes copied per step charged. Copies are where a template's time goes once its
// statements are few, and counting them bounds the memory a render can fill as well.
constexpr size_t kBytesPerStep = 32;

// Work and sizes spent by one render, against its TemplateLimits. Every error names the limit.
class Budget {
 public:
  explicit Budget(const TemplateLimits& limits) : limits_(limits) {}

  Status step(int64_t n = 1) {
    steps_ += n;
    return steps_ <= limits_.max_steps ? Status::ok() : step_limit();
  }
  // Charges a value an operation produced (a step per item and per kBytesPerStep bytes of its
  // strings, which the copy duplicated) and checks it against the size and depth limits.
  Status built(const Value& v);
  // Charges copying `items` (a step each, plus their string bytes).
  Status copied(const Array& items);
  // Charges a copy of an existing string.
  Status copied(const std::string& s) {
    return step(static_cast<int64_t>(s.size() / kBytesPerStep));
  }
  Status string_fits(size_t bytes) const;
  Status list_fits(size_t items) const;
  const TemplateLimits& limits() const { return limits_; }

 private:
  Status step_limit() const;

  TemplateLimits limits_;
  int64_t steps_ = 0;
};

// obj.name: a member, or a bound method of a string or mapping.
Result<Value> attribute(const Value& obj, const std::string& name, Budget* budget);
// obj[idx] for lists, strings (one byte) and mappings.
Result<Value> item(const Value& obj, const Value& idx, Budget* budget);
// `v is name(args)`.
Result<bool> run_test(const std::string& name, const Value& v, const std::vector<Value>& args);
// `v | name(args, kwargs)`.
Result<Value> run_filter(const std::string& name, const Value& v, std::vector<Value>& args,
                         Kwargs& kwargs, Budget* budget);
// A whole `d` as an integer when it fits an int64, else as a float: converting an
// out-of-range double to an integer is undefined.
Value integral(double d);
// raise_exception, namespace, range and strftime_now. `budget` must outlive the functions.
std::vector<std::pair<std::string, Value>> global_functions(Budget* budget);

}  // namespace mx::jinja
