#include "text/jinja_builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>

namespace mx::jinja {

Status error(const std::string& message) { return invalid_argument("chat template: " + message); }

Status Budget::step_limit() const {
  return error("step limit: more than " + std::to_string(limits_.max_steps) +
               " steps (statements, expressions, loop iterations and copies)");
}

Status Budget::string_fits(size_t bytes) const {
  if (bytes <= limits_.max_output_bytes) return Status::ok();
  return error("output size limit: a string of more than " +
               std::to_string(limits_.max_output_bytes) + " bytes");
}

Status Budget::list_fits(size_t items) const {
  if (items <= limits_.max_list_items) return Status::ok();
  return error("list size limit: a list of more than " + std::to_string(limits_.max_list_items) +
               " items");
}

Status Budget::copied(const Array& items) {
  size_t bytes = 0;
  for (const Value& e : items) bytes += e.s.size();
  return step(static_cast<int64_t>(items.size() + bytes / kBytesPerStep));
}

Status Budget::built(const Value& v) {
  size_t items = 0, bytes = 0;
  if (v.is_string()) {
    MX_RETURN_IF_ERROR(string_fits(v.s.size()));
    bytes = v.s.size();
  } else if (v.is_array()) {
    MX_RETURN_IF_ERROR(list_fits(v.a->size()));
    items = v.a->size();
    for (const Value& e : *v.a) bytes += e.s.size();
  } else if (v.is_mapping()) {
    items = v.o->size();
    for (const auto& [k, e] : *v.o) bytes += k.size() + e.s.size();
  }
  const auto cost = static_cast<int64_t>(1 + items + bytes / kBytesPerStep);
  if (v.depth > kMaxValueDepth) {
    return error("value depth limit: a value nested deeper than " + std::to_string(kMaxValueDepth) +
                 " levels");
  }
  return step(cost);
}

Value integral(double d) {
  if (std::isfinite(d) && std::fabs(d) < 9.2e18) return Value::integer(static_cast<int64_t>(d));
  return Value::floating(d);
}

namespace {

std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  size_t b = 0, e = s.size();
  auto in = [&](char c) {
    return chars.empty() ? std::isspace(static_cast<unsigned char>(c)) != 0
                         : chars.find(c) != std::string::npos;
  };
  if (left)
    while (b < e && in(s[b])) ++b;
  if (right)
    while (e > b && in(s[e - 1])) --e;
  return s.substr(b, e - b);
}

Value kwarg(const Kwargs& kw, const char* name, const std::vector<Value>& args, size_t pos,
            Value fallback = Value::undefined()) {
  for (const auto& [k, v] : kw) {
    if (k == name) return v;
  }
  return pos < args.size() ? args[pos] : fallback;
}

int64_t py_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

std::string title_case(const std::string& s) {
  std::string out = s;
  bool start = true;
  for (char& c : out) {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      c = static_cast<char>(start ? std::toupper(static_cast<unsigned char>(c))
                                  : std::tolower(static_cast<unsigned char>(c)));
      start = false;
    } else {
      start = true;
    }
  }
  return out;
}

// Items of `v` joined by `sep`, failing as soon as the text outgrows the budget.
Result<std::string> join_items(const Array& items, const std::string& sep, Budget* budget) {
  MX_RETURN_IF_ERROR(budget->step(static_cast<int64_t>(items.size())));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i].to_string();
    MX_RETURN_IF_ERROR(budget->string_fits(out.size()));
  }
  return out;
}

Result<Value> split(const std::string& s, const std::vector<Value>& a, const Kwargs& kw,
                    Budget* budget) {
  const Value sep = kwarg(kw, "sep", a, 0);
  const Value maxv = kwarg(kw, "maxsplit", a, 1, Value::integer(-1));
  int64_t maxsplit = maxv.kind == Value::Kind::kInt ? maxv.i : -1;
  Array parts;
  auto add = [&](std::string part) -> Status {
    parts.push_back(Value::string(std::move(part)));
    MX_RETURN_IF_ERROR(budget->list_fits(parts.size()));
    return budget->step();
  };
  if (sep.is_undefined() || sep.is_none()) {
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
      if (i >= s.size()) break;
      if (maxsplit == 0) {
        MX_RETURN_IF_ERROR(add(strip_chars(s.substr(i), "", false, true)));
        break;
      }
      size_t j = i;
      while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      MX_RETURN_IF_ERROR(add(s.substr(i, j - i)));
      --maxsplit;
      i = j;
    }
    return Value::array(std::move(parts));
  }
  if (sep.s.empty()) return error("split() with an empty separator");
  size_t i = 0;
  for (;;) {
    const size_t j = maxsplit == 0 ? std::string::npos : s.find(sep.s, i);
    if (j == std::string::npos) {
      MX_RETURN_IF_ERROR(add(s.substr(i)));
      break;
    }
    MX_RETURN_IF_ERROR(add(s.substr(i, j - i)));
    i = j + sep.s.size();
    --maxsplit;
  }
  return Value::array(std::move(parts));
}

Result<Value> replace(const std::string& s, const std::vector<Value>& a, Budget* budget) {
  auto arg_str = [&](size_t i) {
    return i < a.size() && a[i].is_string() ? a[i].s : std::string();
  };
  const std::string from = arg_str(0), to = arg_str(1);
  int64_t count = a.size() > 2 && a[2].kind == Value::Kind::kInt ? a[2].i : -1;
  if (from.empty()) return Value::string(s);
  std::string out;
  size_t i = 0;
  for (;;) {
    const size_t j = count == 0 ? std::string::npos : s.find(from, i);
    if (j == std::string::npos) break;
    out.append(s, i, j - i);
    out += to;
    MX_RETURN_IF_ERROR(budget->string_fits(out.size()));
    i = j + from.size();
    --count;
  }
  out.append(s, i, std::string::npos);
  return Value::string(std::move(out));
}

Result<Value> string_method(const std::string& s, const std::string& name, std::vector<Value>& a,
                            Kwargs& kw, Budget* budget) {
  auto arg_str = [&](size_t i) {
    return i < a.size() && a[i].is_string() ? a[i].s : std::string();
  };
  if (name == "startswith" || name == "endswith") {
    std::vector<std::string> opts;
    if (!a.empty() && a[0].is_array()) {
      for (const Value& v : *a[0].a) opts.push_back(v.s);
    } else {
      opts.push_back(arg_str(0));
    }
    for (const std::string& o : opts) {
      const bool hit = name == "startswith" ? s.rfind(o, 0) == 0
                                            : s.size() >= o.size() &&
                                                  s.compare(s.size() - o.size(), o.size(), o) == 0;
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const std::string chars = arg_str(0);
    return Value::string(strip_chars(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper" || name == "lower") {
    std::string o = s;
    for (char& c : o)
      c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                            : std::tolower(static_cast<unsigned char>(c)));
    return Value::string(o);
  }
  if (name == "title") return Value::string(title_case(s));
  if (name == "capitalize") {
    std::string o = s;
    for (size_t i = 0; i < o.size(); ++i)
      o[i] = static_cast<char>(i ? std::tolower(static_cast<unsigned char>(o[i]))
                                 : std::toupper(static_cast<unsigned char>(o[i])));
    return Value::string(o);
  }
  if (name == "split") return split(s, a, kw, budget);
  if (name == "replace") return replace(s, a, budget);
  if (name == "join") {
    if (a.empty() || !a[0].is_array()) return Value::string("");
    MX_ASSIGN_OR_RETURN(std::string out, join_items(*a[0].a, s, budget));
    return Value::string(std::move(out));
  }
  return error("unknown string method '" + name + "'");
}

}  // namespace

Result<Value> attribute(const Value& obj, const std::string& name, Budget* budget) {
  if (obj.is_mapping()) {
    Value member = obj.get(name);
    if (!member.is_undefined() || obj.kind == Value::Kind::kNamespace) return member;
    if (name == "items" || name == "keys" || name == "values" || name == "get") {
      Value self = obj;
      return Value::function([self, name](std::vector<Value>& a, Kwargs&) -> Result<Value> {
        Array out;
        if (name == "get") {
          Value v = self.get(a.empty() ? std::string() : a[0].to_string());
          return v.is_undefined() ? (a.size() > 1 ? a[1] : Value::null()) : v;
        }
        for (const auto& [k, v] : *self.o) {
          if (name == "items") out.push_back(Value::array({Value::string(k), v}));
          if (name == "keys") out.push_back(Value::string(k));
          if (name == "values") out.push_back(v);
        }
        return Value::array(std::move(out));
      });
    }
    return member;
  }
  if (obj.is_string()) {
    const std::string s = obj.s;
    return Value::function([s, name, budget](std::vector<Value>& a, Kwargs& kw) {
      return string_method(s, name, a, kw, budget);
    });
  }
  if (obj.is_array() && name == "length")
    return Value::integer(static_cast<int64_t>(obj.a->size()));
  if (obj.is_undefined() || obj.is_none()) {
    return error("cannot read attribute '" + name + "' of " +
                 (obj.is_none() ? "none" : "an undefined value"));
  }
  return Value::undefined();
}

Result<Value> item(const Value& obj, const Value& idx, Budget* budget) {
  if (obj.is_array() && idx.kind == Value::Kind::kInt) {
    const int64_t n = static_cast<int64_t>(obj.a->size());
    const int64_t i = py_index(idx.i, n);
    return i >= 0 && i < n ? (*obj.a)[static_cast<size_t>(i)] : Value::undefined();
  }
  if (obj.is_string() && idx.kind == Value::Kind::kInt) {
    const int64_t n = static_cast<int64_t>(obj.s.size());
    const int64_t i = py_index(idx.i, n);
    return i >= 0 && i < n ? Value::string(std::string(1, obj.s[static_cast<size_t>(i)]))
                           : Value::undefined();
  }
  if (obj.is_mapping()) return attribute(obj, idx.to_string(), budget);
  if (obj.is_undefined() || obj.is_none()) return error("cannot index an undefined value");
  return Value::undefined();
}

Result<bool> run_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind == K::kInt;
  if (name == "float") return v.kind == K::kFloat;
  if (name == "boolean") return v.kind == K::kBool;
  if (name == "true") return v.kind == K::kBool && v.b;
  if (name == "false") return v.kind == K::kBool && !v.b;
  if (name == "mapping") return v.is_mapping();
  // Python's meanings: a mapping has a length and items, so it is a sequence (as in the
  // peer) and iterable (the peer says not).
  if (name == "sequence" || name == "iterable")
    return v.is_array() || v.is_string() || v.is_mapping();
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "odd" || name == "even") {
    if (v.kind != K::kInt) return error("'" + name + "' test needs an integer");
    return (v.i % 2 != 0) == (name == "odd");
  }
  if (name == "equalto" || name == "eq" || name == "sameas")
    return !args.empty() && values_equal(v, args[0]);
  if (name == "ne") return args.empty() || !values_equal(v, args[0]);
  if (name == "lower")
    return v.is_string() && std::none_of(v.s.begin(), v.s.end(), [](char c) {
             return std::isupper(static_cast<unsigned char>(c));
           });
  if (name == "upper")
    return v.is_string() && std::none_of(v.s.begin(), v.s.end(), [](char c) {
             return std::islower(static_cast<unsigned char>(c));
           });
  return error("unknown test '" + name + "'");
}

namespace {

// The filters that walk a list: selectattr, rejectattr and map.
Result<Value> list_filter(const std::string& f, const Value& v, std::vector<Value>& args,
                          Kwargs& kw, Budget* budget) {
  if (!v.is_array()) return error("'" + f + "' needs a list");
  MX_RETURN_IF_ERROR(budget->step(static_cast<int64_t>(v.a->size())));
  Array out;
  if (f == "map") {
    const Value attr = kwarg(kw, "attribute", {}, 0);
    for (const Value& x : *v.a) {
      if (!attr.is_undefined()) {
        MX_ASSIGN_OR_RETURN(Value y, attribute(x, attr.to_string(), budget));
        out.push_back(y);
      } else if (!args.empty()) {
        return error("'map' with a filter name is not supported");
      }
    }
    return Value::array(std::move(out));
  }
  if (args.empty()) return error("'" + f + "' needs an attribute name");
  for (const Value& x : *v.a) {
    MX_ASSIGN_OR_RETURN(Value attr, attribute(x, args[0].to_string(), budget));
    bool keep = attr.truthy();
    if (args.size() > 1) {
      std::vector<Value> targs(args.begin() + 2, args.end());
      MX_ASSIGN_OR_RETURN(keep, run_test(args[1].to_string(), attr, targs));
    }
    if (keep == (f == "selectattr")) out.push_back(x);
  }
  return Value::array(std::move(out));
}

// int, float and abs.
Result<Value> number_filter(const std::string& f, const Value& v) {
  if (f == "int") {
    if (v.kind == Value::Kind::kInt) return v;
    if (v.kind == Value::Kind::kFloat) {
      const Value i = integral(std::trunc(v.f));
      return i.kind == Value::Kind::kInt ? i : Value::integer(0);
    }
    if (v.is_string()) return Value::integer(std::strtoll(v.s.c_str(), nullptr, 10));
    return Value::integer(0);
  }
  if (f == "float") {
    if (v.is_number()) return Value::floating(v.as_double());
    if (v.is_string()) return Value::floating(std::strtod(v.s.c_str(), nullptr));
    return Value::floating(0);
  }
  if (f == "abs") {
    if (v.kind == Value::Kind::kInt) {
      if (v.i == INT64_MIN) return Value::floating(-static_cast<double>(v.i));  // no int64 holds it
      return Value::integer(v.i < 0 ? -v.i : v.i);
    }
    if (v.kind == Value::Kind::kFloat) return Value::floating(std::fabs(v.f));
    return error("'abs' needs a number");
  }
  return error("unknown filter '" + f + "'");
}

Result<Value> tojson(const Value& v, std::vector<Value>& args, Kwargs& kw, Budget* budget) {
  const Value ind = kwarg(kw, "indent", args, 0);
  JsonOptions opt;
  opt.max_bytes = budget->limits().max_output_bytes;
  if (ind.kind == Value::Kind::kInt) {
    MX_RETURN_IF_ERROR(budget->string_fits(ind.i < 0 ? 0 : static_cast<size_t>(ind.i)));
    opt.indent = static_cast<int>(std::max<int64_t>(ind.i, -1));
  }
  std::string out;
  if (!append_json(v, opt, &out)) return budget->string_fits(opt.max_bytes + 1);
  return Value::string(std::move(out));
}

}  // namespace

Result<Value> run_filter(const std::string& f, const Value& v, std::vector<Value>& args, Kwargs& kw,
                         Budget* budget) {
  if (f == "length" || f == "count") {
    if (v.is_string()) return Value::integer(static_cast<int64_t>(v.s.size()));
    if (v.is_array()) return Value::integer(static_cast<int64_t>(v.a->size()));
    if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.o->size()));
    return error("cannot take the length of " + v.to_string());
  }
  if (f == "tojson") return tojson(v, args, kw, budget);
  if (f == "trim") return Value::string(strip_chars(v.to_string(), "", true, true));
  if (f == "string") return Value::string(v.to_string());
  if (f == "upper" || f == "lower" || f == "title" || f == "capitalize") {
    std::vector<Value> none;
    return string_method(v.to_string(), f, none, kw, budget);
  }
  if (f == "safe" || f == "escape" || f == "e") return v;
  if (f == "first" || f == "last") {
    if (v.is_array())
      return v.a->empty() ? Value::undefined() : (f == "first" ? v.a->front() : v.a->back());
    if (v.is_string())
      return v.s.empty() ? Value::undefined()
                         : Value::string(std::string(1, f == "first" ? v.s.front() : v.s.back()));
    return error("'" + f + "' needs a list or a string");
  }
  if (f == "join") {
    if (!v.is_array()) return Value::string("");
    const Value sep = kwarg(kw, "d", args, 0, Value::string(""));
    MX_ASSIGN_OR_RETURN(std::string out, join_items(*v.a, sep.to_string(), budget));
    return Value::string(std::move(out));
  }
  if (f == "default" || f == "d") {
    const Value def = kwarg(kw, "default_value", args, 0, Value::string(""));
    const bool boolean = kwarg(kw, "boolean", args, 1, Value::boolean(false)).truthy();
    return (v.is_undefined() || (boolean && !v.truthy())) ? def : v;
  }
  if (f == "list") {
    if (v.is_array()) return v;
    Array out;
    if (v.is_string()) {
      MX_RETURN_IF_ERROR(budget->list_fits(v.s.size()));
      for (char c : v.s) out.push_back(Value::string(std::string(1, c)));
    }
    if (v.is_mapping())
      for (const auto& [k, x] : *v.o) out.push_back(Value::string(k));
    return Value::array(std::move(out));
  }
  if (f == "reverse") {
    if (v.is_string()) return Value::string(std::string(v.s.rbegin(), v.s.rend()));
    if (v.is_array()) return Value::array(Array(v.a->rbegin(), v.a->rend()));
    return error("'reverse' needs a list or a string");
  }
  if (f == "items") {
    if (!v.is_mapping()) return error("'items' needs a mapping");
    Array out;
    for (const auto& [k, x] : *v.o) out.push_back(Value::array({Value::string(k), x}));
    return Value::array(std::move(out));
  }
  if (f == "int" || f == "float" || f == "abs") return number_filter(f, v);
  if (f == "replace") return replace(v.to_string(), args, budget);
  if (f == "selectattr" || f == "rejectattr" || f == "map")
    return list_filter(f, v, args, kw, budget);
  return error("unknown filter '" + f + "'");
}

namespace {

// range(stop), range(start, stop[, step]) for any int64 bounds. The count and the offsets are
// computed in unsigned arithmetic, where they are exact; each value lies between start and
// stop, so converting it back is exact too.
Result<Value> range(const std::vector<Value>& a, Budget* budget) {
  int64_t start = 0, stop = 0, step = 1;
  if (a.size() == 1) stop = a[0].i;
  if (a.size() >= 2) {
    start = a[0].i;
    stop = a[1].i;
  }
  if (a.size() >= 3) step = a[2].i;
  if (step == 0) return error("range() step cannot be zero");
  const bool up = step > 0;
  const auto ustart = static_cast<uint64_t>(start), ustop = static_cast<uint64_t>(stop);
  const uint64_t span =
      up ? (stop > start ? ustop - ustart : 0) : (start > stop ? ustart - ustop : 0);
  const uint64_t stride = up ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
  const uint64_t n = span / stride + (span % stride != 0 ? 1 : 0);
  MX_RETURN_IF_ERROR(budget->list_fits(n));
  Array out;
  out.reserve(n);
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t offset = k * stride;
    out.push_back(Value::integer(static_cast<int64_t>(up ? ustart + offset : ustart - offset)));
  }
  return Value::array(std::move(out));
}

}  // namespace

std::vector<std::pair<std::string, Value>> global_functions(Budget* budget) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("raise_exception",
                 Value::function([](std::vector<Value>& a, Kwargs&) -> Result<Value> {
                   return error(a.empty() ? "raise_exception()" : a[0].to_string());
                 }));
  g.emplace_back("namespace", Value::function([](std::vector<Value>&, Kwargs& kw) -> Result<Value> {
                   Value ns = Value::namespace_();
                   for (auto& [k, v] : kw) MX_RETURN_IF_ERROR(ns.set(k, std::move(v)));
                   return ns;
                 }));
  g.emplace_back("range",
                 Value::function([budget](std::vector<Value>& a, Kwargs&) -> Result<Value> {
                   return range(a, budget);
                 }));
  g.emplace_back("strftime_now",
                 Value::function([](std::vector<Value>& a, Kwargs&) -> Result<Value> {
                   const std::time_t t = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&t, &tm);
                   char buf[256];
                   const std::string fmt = a.empty() ? "%Y-%m-%d" : a[0].to_string();
                   // 0 when the text does not fit, and then buf holds nothing usable.
                   const size_t n = std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
                   return Value::string(std::string(buf, n));
                 }));
  return g;
}

}  // namespace mx::jinja
