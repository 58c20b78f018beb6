#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <map>

#include "core/mapped_file.h"
#include "text/chat_template.h"
#include "text/jinja_ast.h"

namespace mx {
namespace jinja {
namespace {

Status err(const std::string& m) { return invalid_argument("chat template: " + m); }

struct Scope {
  std::vector<std::map<std::string, Value>> frames;
  Value lookup(const std::string& n) const {
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      if (auto f = it->find(n); f != it->end()) return f->second;
    }
    return Value::undefined();
  }
  void set(const std::string& n, Value v) { frames.back()[n] = std::move(v); }
};

enum class Flow { kNormal, kBreak, kContinue };

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

Result<Value> string_method(const std::string& s, const std::string& name, std::vector<Value>& a,
                            Kwargs& kw) {
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
  if (name == "split") {
    const Value sep = kwarg(kw, "sep", a, 0);
    const Value maxv = kwarg(kw, "maxsplit", a, 1, Value::integer(-1));
    int64_t maxsplit = maxv.kind == Value::Kind::kInt ? maxv.i : -1;
    Array parts;
    if (sep.is_undefined() || sep.is_none()) {
      size_t i = 0;
      while (i < s.size()) {
        while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
        if (i >= s.size()) break;
        if (maxsplit == 0) {
          parts.push_back(Value::string(strip_chars(s.substr(i), "", false, true)));
          break;
        }
        size_t j = i;
        while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
        parts.push_back(Value::string(s.substr(i, j - i)));
        --maxsplit;
        i = j;
      }
      return Value::array(std::move(parts));
    }
    if (sep.s.empty()) return err("split() with an empty separator");
    size_t i = 0;
    for (;;) {
      const size_t j = maxsplit == 0 ? std::string::npos : s.find(sep.s, i);
      if (j == std::string::npos) {
        parts.push_back(Value::string(s.substr(i)));
        break;
      }
      parts.push_back(Value::string(s.substr(i, j - i)));
      i = j + sep.s.size();
      --maxsplit;
    }
    return Value::array(std::move(parts));
  }
  if (name == "replace") {
    const std::string from = arg_str(0), to = arg_str(1);
    int64_t count = a.size() > 2 && a[2].kind == Value::Kind::kInt ? a[2].i : -1;
    if (from.empty()) return Value::string(s);
    std::string out;
    size_t i = 0;
    for (;;) {
      const size_t j = count == 0 ? std::string::npos : s.find(from, i);
      if (j == std::string::npos) break;
      out += s.substr(i, j - i) + to;
      i = j + from.size();
      --count;
    }
    return Value::string(out + s.substr(i));
  }
  if (name == "join") {
    std::string out;
    if (!a.empty() && a[0].is_array()) {
      for (size_t i = 0; i < a[0].a->size(); ++i) out += (i ? s : "") + (*a[0].a)[i].to_string();
    }
    return Value::string(out);
  }
  return err("unknown string method '" + name + "'");
}

class Interpreter {
 public:
  explicit Interpreter(Scope scope) : scope_(std::move(scope)) {}

  Status run(const Body& body, std::string* out) {
    Flow f = Flow::kNormal;
    return exec(body, out, &f);
  }

 private:
  Status exec(const Body& body, std::string* out, Flow* flow) {
    for (const auto& st : body) {
      MX_RETURN_IF_ERROR(exec_one(*st, out, flow));
      if (*flow != Flow::kNormal) return Status::ok();
    }
    return Status::ok();
  }

  Status exec_one(const Stmt& st, std::string* out, Flow* flow) {
    switch (st.kind) {
      case Stmt::Kind::kText:
        *out += st.text;
        return Status::ok();
      case Stmt::Kind::kOutput: {
        MX_ASSIGN_OR_RETURN(Value v, eval(*st.expr));
        if (!v.is_none()) *out += v.to_string();  // none prints nothing
        return Status::ok();
      }
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : st.branches) {
          MX_ASSIGN_OR_RETURN(Value c, eval(*cond));
          if (c.truthy()) return exec(body, out, flow);
        }
        return exec(st.else_body, out, flow);
      case Stmt::Kind::kSet: {
        MX_ASSIGN_OR_RETURN(Value v, eval(*st.expr));
        if (!st.set_attr) {
          scope_.set(st.targets[0], std::move(v));
          return Status::ok();
        }
        Value ns = scope_.lookup(st.targets[0]);
        if (ns.kind != Value::Kind::kNamespace) {
          return err("cannot set attribute '" + st.targets[1] + "' of '" + st.targets[0] +
                     "', which is not a namespace");
        }
        ns.set(st.targets[1], std::move(v));
        return Status::ok();
      }
      case Stmt::Kind::kFor:
        return exec_for(st, out, flow);
      case Stmt::Kind::kBreak:
        *flow = Flow::kBreak;
        return Status::ok();
      case Stmt::Kind::kContinue:
        *flow = Flow::kContinue;
        return Status::ok();
    }
    return Status::ok();
  }

  Status exec_for(const Stmt& st, std::string* out, Flow* flow) {
    MX_ASSIGN_OR_RETURN(Value it, eval(*st.expr));
    Array items;
    if (it.is_array()) {
      items = *it.a;
    } else if (it.is_mapping()) {
      for (const auto& [k, v] : *it.o) items.push_back(Value::string(k));
    } else if (it.is_string()) {
      for (char c : it.s) items.push_back(Value::string(std::string(1, c)));
    } else if (!it.is_undefined() && !it.is_none()) {
      return err("cannot iterate over a " + it.to_string());
    }
    // Filtered loops ("for x in xs if c") number only the items that pass.
    std::vector<Value> kept;
    for (const Value& v : items) {
      if (st.filter) {
        scope_.frames.emplace_back();
        bind(st, v);
        auto c = eval(*st.filter);
        scope_.frames.pop_back();
        if (!c.is_ok()) return c.status();
        if (!c->truthy()) continue;
      }
      kept.push_back(v);
    }
    if (kept.empty()) return exec(st.else_body, out, flow);
    const int64_t n = static_cast<int64_t>(kept.size());
    for (int64_t i = 0; i < n; ++i) {
      scope_.frames.emplace_back();
      bind(st, kept[static_cast<size_t>(i)]);
      Value loop = Value::object(
          {{"index", Value::integer(i + 1)},
           {"index0", Value::integer(i)},
           {"revindex", Value::integer(n - i)},
           {"revindex0", Value::integer(n - i - 1)},
           {"first", Value::boolean(i == 0)},
           {"last", Value::boolean(i == n - 1)},
           {"length", Value::integer(n)},
           {"previtem", i > 0 ? kept[static_cast<size_t>(i - 1)] : Value::undefined()},
           {"nextitem", i + 1 < n ? kept[static_cast<size_t>(i + 1)] : Value::undefined()}});
      scope_.set("loop", loop);
      Flow inner = Flow::kNormal;
      Status s = exec(st.body, out, &inner);
      // Assignments inside a loop body do not leak out (Jinja scoping), but namespace
      // attributes do, since namespaces are shared objects.
      scope_.frames.pop_back();
      MX_RETURN_IF_ERROR(s);
      if (inner == Flow::kBreak) break;
    }
    (void)flow;
    return Status::ok();
  }

  void bind(const Stmt& st, const Value& v) {
    if (st.targets.size() == 1) {
      scope_.set(st.targets[0], v);
      return;
    }
    for (size_t k = 0; k < st.targets.size(); ++k) {
      scope_.set(st.targets[k], v.is_array() && k < v.a->size() ? (*v.a)[k] : Value::undefined());
    }
  }

  Result<Value> eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return scope_.lookup(e.name);
      case Expr::Kind::kList: {
        Array a;
        for (const auto& x : e.args) {
          MX_ASSIGN_OR_RETURN(Value v, eval(*x));
          a.push_back(std::move(v));
        }
        return Value::array(std::move(a));
      }
      case Expr::Kind::kDict: {
        Object o;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          MX_ASSIGN_OR_RETURN(Value k, eval(*e.args[i]));
          MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
          o.emplace_back(k.to_string(), std::move(v));
        }
        return Value::object(std::move(o));
      }
      case Expr::Kind::kAttr: {
        MX_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
        return attribute(obj, e.name);
      }
      case Expr::Kind::kItem: {
        MX_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
        MX_ASSIGN_OR_RETURN(Value idx, eval(*e.args[1]));
        return item(obj, idx);
      }
      case Expr::Kind::kSlice:
        return slice(e);
      case Expr::Kind::kCall:
        return call(e);
      case Expr::Kind::kFilter:
        return filter(e);
      case Expr::Kind::kTest: {
        MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
        std::vector<Value> args;
        for (size_t i = 1; i < e.args.size(); ++i) {
          MX_ASSIGN_OR_RETURN(Value a, eval(*e.args[i]));
          args.push_back(std::move(a));
        }
        MX_ASSIGN_OR_RETURN(bool r, test(e.name, v, args));
        return Value::boolean(r != e.negated);
      }
      case Expr::Kind::kUnary: {
        MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.kind == Value::Kind::kInt) return Value::integer(-v.i);
        if (v.kind == Value::Kind::kFloat) return Value::floating(-v.f);
        return err("unary minus on a non-number");
      }
      case Expr::Kind::kTernary: {
        MX_ASSIGN_OR_RETURN(Value c, eval(*e.args[0]));
        return eval(*e.args[c.truthy() ? 1 : 2]);
      }
      case Expr::Kind::kBinary:
        return binary(e);
    }
    return err("unknown expression");
  }

  Result<Value> attribute(const Value& obj, const std::string& name) {
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
      return Value::function(
          [s, name](std::vector<Value>& a, Kwargs& kw) { return string_method(s, name, a, kw); });
    }
    if (obj.is_array() && name == "length")
      return Value::integer(static_cast<int64_t>(obj.a->size()));
    if (obj.is_undefined() || obj.is_none()) {
      return err("cannot read attribute '" + name + "' of " +
                 (obj.is_none() ? "none" : "an undefined value"));
    }
    return Value::undefined();
  }

  Result<Value> item(const Value& obj, const Value& idx) {
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
    if (obj.is_mapping()) return attribute(obj, idx.to_string());
    if (obj.is_undefined() || obj.is_none()) return err("cannot index an undefined value");
    return Value::undefined();
  }

  Result<Value> slice(const Expr& e) {
    MX_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
    int64_t bounds[3] = {0, 0, 1};
    for (int k = 0; k < 3; ++k) {
      if (!e.has_slice[k]) continue;
      MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[static_cast<size_t>(k + 1)]));
      if (v.kind != Value::Kind::kInt) return err("slice bounds must be integers");
      bounds[k] = v.i;
    }
    const int64_t step = bounds[2];
    if (step == 0) return err("slice step cannot be zero");
    const int64_t n = obj.is_array()    ? static_cast<int64_t>(obj.a->size())
                      : obj.is_string() ? static_cast<int64_t>(obj.s.size())
                                        : -1;
    if (n < 0) return err("cannot slice this value");
    auto clampi = [&](int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(hi, v)); };
    int64_t start, stop;
    if (step > 0) {
      start = e.has_slice[0] ? clampi(py_index(bounds[0], n), 0, n) : 0;
      stop = e.has_slice[1] ? clampi(py_index(bounds[1], n), 0, n) : n;
    } else {
      start = e.has_slice[0] ? clampi(py_index(bounds[0], n), -1, n - 1) : n - 1;
      stop = e.has_slice[1] ? clampi(py_index(bounds[1], n), -1, n - 1) : -1;
    }
    Array a;
    std::string s;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (obj.is_array())
        a.push_back((*obj.a)[static_cast<size_t>(i)]);
      else
        s += obj.s[static_cast<size_t>(i)];
    }
    return obj.is_array() ? Value::array(std::move(a)) : Value::string(s);
  }

  Result<std::pair<std::vector<Value>, Kwargs>> eval_args(const Expr& e, size_t first) {
    std::vector<Value> args;
    Kwargs kw;
    for (size_t i = first; i < e.args.size(); ++i) {
      MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[i]));
      args.push_back(std::move(v));
    }
    for (const auto& [k, x] : e.kwargs) {
      MX_ASSIGN_OR_RETURN(Value v, eval(*x));
      kw.emplace_back(k, std::move(v));
    }
    return std::make_pair(std::move(args), std::move(kw));
  }

  Result<Value> call(const Expr& e) {
    MX_ASSIGN_OR_RETURN(Value fn, eval(*e.args[0]));
    MX_ASSIGN_OR_RETURN(auto a, eval_args(e, 1));
    if (fn.kind != Value::Kind::kFunction) {
      const std::string what = e.args[0]->kind == Expr::Kind::kName   ? e.args[0]->name
                               : e.args[0]->kind == Expr::Kind::kAttr ? e.args[0]->name
                                                                      : "value";
      return err("'" + what + "' is not callable");
    }
    return (*fn.fn)(a.first, a.second);
  }

  Result<Value> filter(const Expr& e);
  Result<bool> test(const std::string& name, const Value& v, const std::vector<Value>& args);
  Result<Value> binary(const Expr& e);

  Scope scope_;
};

Result<Value> Interpreter::binary(const Expr& e) {
  const std::string& op = e.name;
  MX_ASSIGN_OR_RETURN(Value l, eval(*e.args[0]));
  if (op == "and") return l.truthy() ? eval(*e.args[1]) : l;
  if (op == "or") return l.truthy() ? l : eval(*e.args[1]);
  MX_ASSIGN_OR_RETURN(Value r, eval(*e.args[1]));
  if (op == "==") return Value::boolean(values_equal(l, r));
  if (op == "!=") return Value::boolean(!values_equal(l, r));
  if (op == "~") return Value::string(l.to_string() + r.to_string());
  if (op == "in" || op == "not in") {
    bool found = false;
    if (r.is_string())
      found = r.s.find(l.to_string()) != std::string::npos && l.is_string();
    else if (r.is_array())
      found =
          std::any_of(r.a->begin(), r.a->end(), [&](const Value& x) { return values_equal(x, l); });
    else if (r.is_mapping())
      found = !r.get(l.to_string()).is_undefined();
    return Value::boolean(found == (op == "in"));
  }
  if (op == "+" && l.is_string() && r.is_string()) return Value::string(l.s + r.s);
  if (op == "+" && l.is_array() && r.is_array()) {
    Array a = *l.a;
    a.insert(a.end(), r.a->begin(), r.a->end());
    return Value::array(std::move(a));
  }
  if (op == "*" && l.is_string() && r.kind == Value::Kind::kInt) {
    std::string s;
    for (int64_t i = 0; i < r.i; ++i) s += l.s;
    return Value::string(s);
  }
  if (l.is_string() && r.is_string()) {
    if (op == "<") return Value::boolean(l.s < r.s);
    if (op == ">") return Value::boolean(l.s > r.s);
    if (op == "<=") return Value::boolean(l.s <= r.s);
    if (op == ">=") return Value::boolean(l.s >= r.s);
  }
  if (!l.is_number() || !r.is_number()) {
    return err("operator '" + op + "' needs numbers (got " + l.to_string() + " and " +
               r.to_string() + ")");
  }
  const bool ints = l.kind == Value::Kind::kInt && r.kind == Value::Kind::kInt;
  const double a = l.as_double(), b = r.as_double();
  if (op == "<") return Value::boolean(a < b);
  if (op == ">") return Value::boolean(a > b);
  if (op == "<=") return Value::boolean(a <= b);
  if (op == ">=") return Value::boolean(a >= b);
  if (op == "+") return ints ? Value::integer(l.i + r.i) : Value::floating(a + b);
  if (op == "-") return ints ? Value::integer(l.i - r.i) : Value::floating(a - b);
  if (op == "*") return ints ? Value::integer(l.i * r.i) : Value::floating(a * b);
  if (op == "/") return Value::floating(a / b);
  if (op == "//") {
    if (b == 0) return err("division by zero");
    return ints ? Value::integer(static_cast<int64_t>(std::floor(a / b)))
                : Value::floating(std::floor(a / b));
  }
  if (op == "%") {
    if (b == 0) return err("modulo by zero");
    if (ints) return Value::integer(((l.i % r.i) + r.i) % r.i);
    return Value::floating(a - b * std::floor(a / b));
  }
  if (op == "**")
    return ints && r.i >= 0 ? Value::integer(static_cast<int64_t>(std::pow(a, b)))
                            : Value::floating(std::pow(a, b));
  return err("unknown operator '" + op + "'");
}

Result<bool> Interpreter::test(const std::string& name, const Value& v,
                               const std::vector<Value>& args) {
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
  if (name == "sequence" || name == "iterable")
    return v.is_array() || v.is_string() || (name == "iterable" && v.is_mapping());
  if (name == "callable") return v.kind == K::kFunction;
  if (name == "odd" || name == "even") {
    if (v.kind != K::kInt) return err("'" + name + "' test needs an integer");
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
  return err("unknown test '" + name + "'");
}

Result<Value> Interpreter::filter(const Expr& e) {
  MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
  MX_ASSIGN_OR_RETURN(auto a, eval_args(e, 1));
  std::vector<Value>& args = a.first;
  Kwargs& kw = a.second;
  const std::string& f = e.name;
  if (f == "length" || f == "count") {
    if (v.is_string()) return Value::integer(static_cast<int64_t>(v.s.size()));
    if (v.is_array()) return Value::integer(static_cast<int64_t>(v.a->size()));
    if (v.is_mapping()) return Value::integer(static_cast<int64_t>(v.o->size()));
    return err("cannot take the length of " + v.to_string());
  }
  if (f == "tojson") {
    const Value ind = kwarg(kw, "indent", args, 0);
    JsonOptions opt;
    if (ind.kind == Value::Kind::kInt) opt.indent = static_cast<int>(ind.i);
    return Value::string(to_json(v, opt));
  }
  if (f == "trim") return Value::string(strip_chars(v.to_string(), "", true, true));
  if (f == "string") return Value::string(v.to_string());
  if (f == "upper" || f == "lower" || f == "title" || f == "capitalize") {
    std::vector<Value> none;
    return string_method(v.to_string(), f, none, kw);
  }
  if (f == "safe" || f == "escape" || f == "e") return v;
  if (f == "first" || f == "last") {
    if (v.is_array())
      return v.a->empty() ? Value::undefined() : (f == "first" ? v.a->front() : v.a->back());
    if (v.is_string())
      return v.s.empty() ? Value::undefined()
                         : Value::string(std::string(1, f == "first" ? v.s.front() : v.s.back()));
    return err("'" + f + "' needs a list or a string");
  }
  if (f == "join") {
    const Value sep = kwarg(kw, "d", args, 0, Value::string(""));
    std::string out;
    if (v.is_array()) {
      for (size_t i = 0; i < v.a->size(); ++i)
        out += (i ? sep.to_string() : "") + (*v.a)[i].to_string();
    }
    return Value::string(out);
  }
  if (f == "default" || f == "d") {
    const Value def = kwarg(kw, "default_value", args, 0, Value::string(""));
    const bool boolean = kwarg(kw, "boolean", args, 1, Value::boolean(false)).truthy();
    return (v.is_undefined() || (boolean && !v.truthy())) ? def : v;
  }
  if (f == "list") {
    if (v.is_array()) return v;
    Array out;
    if (v.is_string())
      for (char c : v.s) out.push_back(Value::string(std::string(1, c)));
    if (v.is_mapping())
      for (const auto& [k, x] : *v.o) out.push_back(Value::string(k));
    return Value::array(std::move(out));
  }
  if (f == "reverse") {
    if (v.is_string()) return Value::string(std::string(v.s.rbegin(), v.s.rend()));
    if (v.is_array()) return Value::array(Array(v.a->rbegin(), v.a->rend()));
    return err("'reverse' needs a list or a string");
  }
  if (f == "items") {
    if (!v.is_mapping()) return err("'items' needs a mapping");
    Array out;
    for (const auto& [k, x] : *v.o) out.push_back(Value::array({Value::string(k), x}));
    return Value::array(std::move(out));
  }
  if (f == "int") {
    if (v.kind == Value::Kind::kInt) return v;
    if (v.kind == Value::Kind::kFloat) return Value::integer(static_cast<int64_t>(v.f));
    if (v.is_string()) return Value::integer(std::strtoll(v.s.c_str(), nullptr, 10));
    return Value::integer(0);
  }
  if (f == "float") {
    if (v.is_number()) return Value::floating(v.as_double());
    if (v.is_string()) return Value::floating(std::strtod(v.s.c_str(), nullptr));
    return Value::floating(0);
  }
  if (f == "abs") {
    if (v.kind == Value::Kind::kInt) return Value::integer(v.i < 0 ? -v.i : v.i);
    if (v.kind == Value::Kind::kFloat) return Value::floating(std::fabs(v.f));
    return err("'abs' needs a number");
  }
  if (f == "replace") {
    std::vector<Value> ra(args);
    return string_method(v.to_string(), "replace", ra, kw);
  }
  if (f == "selectattr" || f == "rejectattr") {
    if (!v.is_array()) return err("'" + f + "' needs a list");
    if (args.empty()) return err("'" + f + "' needs an attribute name");
    Array out;
    for (const Value& x : *v.a) {
      MX_ASSIGN_OR_RETURN(Value attr, attribute(x, args[0].to_string()));
      bool keep = attr.truthy();
      if (args.size() > 1) {
        std::vector<Value> targs(args.begin() + 2, args.end());
        MX_ASSIGN_OR_RETURN(keep, test(args[1].to_string(), attr, targs));
      }
      if (keep == (f == "selectattr")) out.push_back(x);
    }
    return Value::array(std::move(out));
  }
  if (f == "map") {
    if (!v.is_array()) return err("'map' needs a list");
    const Value attr = kwarg(kw, "attribute", {}, 0);
    Array out;
    for (const Value& x : *v.a) {
      if (!attr.is_undefined()) {
        MX_ASSIGN_OR_RETURN(Value y, attribute(x, attr.to_string()));
        out.push_back(y);
      } else if (!args.empty()) {
        return err("'map' with a filter name is not supported");
      }
    }
    return Value::array(std::move(out));
  }
  return err("unknown filter '" + f + "'");
}

Scope globals() {
  Scope s;
  s.frames.emplace_back();
  s.set("raise_exception", Value::function([](std::vector<Value>& a, Kwargs&) -> Result<Value> {
          return err(a.empty() ? "raise_exception()" : a[0].to_string());
        }));
  s.set("namespace", Value::function([](std::vector<Value>&, Kwargs& kw) -> Result<Value> {
          Object o(kw.begin(), kw.end());
          return Value::namespace_(std::move(o));
        }));
  s.set("range", Value::function([](std::vector<Value>& a, Kwargs&) -> Result<Value> {
          int64_t start = 0, stop = 0, step = 1;
          if (a.size() == 1) stop = a[0].i;
          if (a.size() >= 2) {
            start = a[0].i;
            stop = a[1].i;
          }
          if (a.size() >= 3) step = a[2].i;
          if (step == 0) return err("range() step cannot be zero");
          if ((stop - start) / step > 1000000) return err("range() is too long");
          Array out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            out.push_back(Value::integer(i));
          return Value::array(std::move(out));
        }));
  s.set("strftime_now", Value::function([](std::vector<Value>& a, Kwargs&) -> Result<Value> {
          const std::time_t t = std::time(nullptr);
          std::tm tm{};
          localtime_r(&t, &tm);
          char buf[128];
          const std::string fmt = a.empty() ? "%Y-%m-%d" : a[0].to_string();
          std::strftime(buf, sizeof(buf), fmt.c_str(), &tm);
          return Value::string(buf);
        }));
  return s;
}

}  // namespace
}  // namespace jinja

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  MX_ASSIGN_OR_RETURN(jinja::Body body, jinja::parse_template(source));
  ChatTemplate t;
  t.body_ = std::make_shared<const jinja::Body>(std::move(body));
  return t;
}

Result<ChatTemplate> ChatTemplate::load(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "tokenizer_config.json").string();
  MX_ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  auto j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument(path + ": malformed JSON");
  std::string source;
  if (j.contains("chat_template") && j["chat_template"].is_string()) {
    source = j["chat_template"].get<std::string>();
  } else if (j.contains("chat_template") && j["chat_template"].is_array()) {
    for (const auto& e : j["chat_template"]) {
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template"))
        source = e["template"];
    }
  }
  if (source.empty()) return not_found(path + ": no chat_template");
  auto t = parse(source);
  if (!t.is_ok()) return t.status().with_context(path);
  auto token_text = [&](const char* key) -> std::string {
    if (!j.contains(key)) return "";
    const auto& v = j[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"];
    return "";
  };
  t->bos_ = token_text("bos_token");
  t->eos_ = token_text("eos_token");
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  jinja::Scope scope = jinja::globals();
  scope.set("bos_token", jinja::Value::string(bos_));
  scope.set("eos_token", jinja::Value::string(eos_));
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it)
      scope.set(it.key(), jinja::from_json(it.value()));
  }
  jinja::Interpreter in(std::move(scope));
  std::string out;
  MX_RETURN_IF_ERROR(in.run(*body_, &out));
  return out;
}

Result<std::string> ChatTemplate::apply(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra) const {
  nlohmann::ordered_json ctx = extra.is_object() ? extra : nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["add_generation_prompt"] = add_generation_prompt;
  return render(ctx);
}

}  // namespace mx
