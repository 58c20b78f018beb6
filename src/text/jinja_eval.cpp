#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/mapped_file.h"
#include "text/chat_template.h"
#include "text/jinja_ast.h"
#include "text/jinja_builtins.h"

namespace mx {
namespace jinja {
namespace {

// Statement and expression evaluation nest at most this deep. The parser's limits already keep
// real templates within 2 * kMaxNesting; this bound holds whatever the tree looks like.
constexpr int kMaxEvalDepth = 4 * kMaxNesting;

// Macro calls (and calls of a call block's `caller`) nest at most this deep: a macro calling
// itself fails with an error naming this limit long before the stack could overflow.
constexpr int kMaxCallDepth = 64;

// Variables innermost last, frames marked by where they start. Scopes hold a handful of names,
// so scanning them beats a map per frame, which allocated on every loop iteration.
//
// A macro sees its own frames and the frames that enclosed its definition, not its caller's
// (lexical scope, as in Jinja): a call opens a barrier above which its frames lie, and below
// which only the first `visible_end` variables (those of the defining frames) can be seen.
class Scope {
 public:
  Scope() { push(); }
  void push() { starts_.push_back(vars_.size()); }
  void pop() {
    vars_.erase(vars_.begin() + static_cast<std::ptrdiff_t>(starts_.back()), vars_.end());
    starts_.pop_back();
  }
  size_t frames() const { return starts_.size(); }
  // Opens a call of something defined when `def_frames` frames were open.
  void push_call(size_t def_frames) {
    const size_t visible = def_frames < starts_.size() ? starts_[def_frames] : vars_.size();
    barriers_.push_back({vars_.size(), visible});
    push();
  }
  void pop_call() {
    pop();
    barriers_.pop_back();
  }
  Value lookup(const std::string& n) const {
    size_t end = vars_.size();
    size_t k = barriers_.size();  // barriers at or above k are behind us
    for (;;) {
      const size_t lo = k > 0 ? barriers_[k - 1].start : 0;
      for (size_t i = end; i > lo; --i) {
        if (vars_[i - 1].first == n) return vars_[i - 1].second;
      }
      if (k == 0) return Value::undefined();
      end = std::min(lo, barriers_[k - 1].visible_end);
      --k;
      while (k > 0 && barriers_[k - 1].start >= end) --k;
    }
  }
  void set(const std::string& n, Value v) {
    for (size_t i = starts_.back(); i < vars_.size(); ++i) {
      if (vars_[i].first == n) {
        vars_[i].second = std::move(v);
        return;
      }
    }
    vars_.emplace_back(n, std::move(v));
  }

 private:
  struct Barrier {
    size_t start;        // the call's first variable
    size_t visible_end;  // variables below `start` that the call sees: [0, visible_end)
  };
  std::vector<std::pair<std::string, Value>> vars_;
  std::vector<size_t> starts_;
  std::vector<Barrier> barriers_;
};

enum class Flow { kNormal, kBreak, kContinue };

Status check_depth(const Nest& nest) {
  if (nest.depth() <= kMaxEvalDepth) return Status::ok();
  return error("evaluation depth limit: more than " + std::to_string(kMaxEvalDepth) +
               " nested evaluations");
}

// Integer arithmetic wraps as two's complement instead of overflowing, which is undefined.
int64_t wrap(uint64_t v) { return static_cast<int64_t>(v); }
uint64_t bits(int64_t v) { return static_cast<uint64_t>(v); }

class Interpreter {
 public:
  explicit Interpreter(const TemplateLimits& limits) : budget_(limits) {
    for (auto& [name, fn] : global_functions(&budget_)) scope_.set(name, std::move(fn));
  }

  void set(const std::string& name, Value v) { scope_.set(name, std::move(v)); }

  Status run(const Body& body, std::string* out) {
    Flow f = Flow::kNormal;
    return exec(body, out, &f);
  }

 private:
  Status exec(const Body& body, std::string* out, Flow* flow) {
    Nest nest(&depth_);
    MX_RETURN_IF_ERROR(check_depth(nest));
    for (const auto& st : body) {
      MX_RETURN_IF_ERROR(budget_.step());
      MX_RETURN_IF_ERROR(exec_one(*st, out, flow));
      if (*flow != Flow::kNormal) return Status::ok();
    }
    return Status::ok();
  }

  Status emit(const std::string& text, std::string* out) {
    MX_RETURN_IF_ERROR(budget_.string_fits(out->size() + text.size()));
    *out += text;
    return Status::ok();
  }

  Status exec_one(const Stmt& st, std::string* out, Flow* flow) {
    switch (st.kind) {
      case Stmt::Kind::kText:
        return emit(st.text, out);
      case Stmt::Kind::kOutput: {
        MX_ASSIGN_OR_RETURN(Value v, eval(*st.expr));
        if (v.is_none()) return Status::ok();  // none prints nothing
        if (v.is_string()) return emit(v.s, out);
        return emit(v.to_string(), out);
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
          return error("cannot set attribute '" + st.targets[1] + "' of '" + st.targets[0] +
                       "', which is not a namespace");
        }
        return ns.set(st.targets[1], std::move(v));
      }
      case Stmt::Kind::kSetBlock: {
        std::string text;
        Flow inner = Flow::kNormal;
        MX_RETURN_IF_ERROR(exec(st.body, &text, &inner));
        scope_.set(st.targets[0], Value::string(std::move(text)));
        return Status::ok();
      }
      case Stmt::Kind::kMacro:
        scope_.set(st.targets[0], macro(st));
        return Status::ok();
      case Stmt::Kind::kCallBlock:
        return exec_call_block(st, out);
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

  // A macro (or a call block's caller) as a function of the scope it is defined in. Values
  // live no longer than the render, and the tree outlives it, so `this` and `st` stay valid.
  Value macro(const Stmt& st) {
    const size_t def_frames = scope_.frames();
    return Value::function([this, &st, def_frames](std::vector<Value>& args, Kwargs& kw) {
      return call_macro(st, def_frames, args, kw);
    });
  }

  Result<Value> call_macro(const Stmt& st, size_t def_frames, std::vector<Value>& args,
                           Kwargs& kw) {
    Nest calls(&calls_);
    if (calls.depth() > kMaxCallDepth) {
      return error("macro call depth limit: more than " + std::to_string(kMaxCallDepth) +
                   " nested macro calls ('" + st.targets[0] + "' calls itself?)");
    }
    Nest nest(&depth_);
    MX_RETURN_IF_ERROR(check_depth(nest));
    scope_.push_call(def_frames);
    std::string out;
    Status s = bind_params(st, args, kw);
    Flow flow = Flow::kNormal;
    if (s.is_ok()) s = exec(st.body, &out, &flow);
    scope_.pop_call();
    MX_RETURN_IF_ERROR(s);
    return Value::string(std::move(out));
  }

  // Binds a call's arguments in the call's frame as Jinja does: positional first, then by
  // name, then defaults, which are evaluated last and may use the parameters before them.
  Status bind_params(const Stmt& st, std::vector<Value>& args, Kwargs& kw) {
    const std::string what = st.kind == Stmt::Kind::kMacro ? "macro '" + st.targets[0] + "'"
                                                           : "the caller of a call block";
    if (args.size() > st.params.size()) {
      return error(what + " takes not more than " + std::to_string(st.params.size()) +
                   " argument(s)");
    }
    std::vector<bool> bound(st.params.size(), false);
    for (size_t i = 0; i < args.size(); ++i) {
      scope_.set(st.params[i].first, std::move(args[i]));
      bound[i] = true;
    }
    for (auto& [k, v] : kw) {
      size_t i = 0;
      while (i < st.params.size() && st.params[i].first != k) ++i;
      if (i == st.params.size() && k != "caller")
        return error(what + " takes no keyword argument '" + k + "'");
      if (i < st.params.size() && bound[i])
        return error(what + " got multiple values for argument '" + k + "'");
      if (i < st.params.size()) bound[i] = true;
      scope_.set(k, std::move(v));
    }
    for (size_t i = 0; i < st.params.size(); ++i) {
      if (!bound[i]) scope_.set(st.params[i].first, Value::undefined());
    }
    for (size_t i = 0; i < st.params.size(); ++i) {
      if (bound[i] || !st.params[i].second) continue;
      MX_ASSIGN_OR_RETURN(Value v, eval(*st.params[i].second));
      scope_.set(st.params[i].first, std::move(v));
    }
    return Status::ok();
  }

  // {% call(params) m(args) %}body{% endcall %}: m(args, caller=<body as a macro>).
  Status exec_call_block(const Stmt& st, std::string* out) {
    const Expr& call = *st.expr;
    MX_ASSIGN_OR_RETURN(Value fn, eval(*call.args[0]));
    MX_ASSIGN_OR_RETURN(auto a, eval_args(call, 1));
    if (fn.kind != Value::Kind::kFunction) return error("'{% call %}' of something not callable");
    a.second.emplace_back("caller", macro(st));
    MX_ASSIGN_OR_RETURN(Value v, (*fn.fn)(a.first, a.second));
    MX_RETURN_IF_ERROR(budget_.built(v));
    return emit(v.is_string() ? v.s : v.to_string(), out);
  }

  // What a for loop walks: a list as it is (lists never change, so sharing is safe and a long
  // message list is not copied per loop), a mapping's keys or a string's bytes.
  Result<std::shared_ptr<const Array>> loop_items(const Value& it) {
    if (it.is_array()) return std::shared_ptr<const Array>(it.a);
    Array items;
    if (it.is_mapping()) {
      for (const auto& [k, v] : *it.o) items.push_back(Value::string(k));
    } else if (it.is_string()) {
      MX_RETURN_IF_ERROR(budget_.list_fits(it.s.size()));
      for (char c : it.s) items.push_back(Value::string(std::string(1, c)));
    } else if (!it.is_undefined() && !it.is_none()) {
      return error("cannot iterate over a " + it.to_string());
    }
    return std::make_shared<const Array>(std::move(items));
  }

  Status exec_for(const Stmt& st, std::string* out, Flow* flow) {
    MX_ASSIGN_OR_RETURN(Value it, eval(*st.expr));
    MX_ASSIGN_OR_RETURN(std::shared_ptr<const Array> items, loop_items(it));
    // Binding each item copies its strings.
    MX_RETURN_IF_ERROR(budget_.copied(*items));
    if (st.filter) {
      // Filtered loops ("for x in xs if c") number only the items that pass.
      Array kept;
      for (const Value& v : *items) {
        MX_RETURN_IF_ERROR(budget_.step());
        scope_.push();
        bind(st, v);
        auto c = eval(*st.filter);
        scope_.pop();
        if (!c.is_ok()) return c.status();
        if (c->truthy()) kept.push_back(v);
      }
      items = std::make_shared<const Array>(std::move(kept));
    }
    if (items->empty()) return exec(st.else_body, out, flow);
    const Array& xs = *items;
    const int64_t n = static_cast<int64_t>(xs.size());
    // One loop object per loop, updated in place: Jinja's loop is one object too, and building
    // nine members per iteration was most of an empty iteration's cost.
    Value loop = Value::object({{"index", Value::integer(0)},
                                {"index0", Value::integer(0)},
                                {"revindex", Value::integer(0)},
                                {"revindex0", Value::integer(0)},
                                {"first", Value::boolean(false)},
                                {"last", Value::boolean(false)},
                                {"length", Value::integer(n)},
                                {"previtem", {}},
                                {"nextitem", {}}});
    // previtem and nextitem are items of the list, so the list bounds what they hold.
    loop.depth = std::max(loop.depth, it.depth);
    loop.holds_namespace = it.holds_namespace;
    Object& fields = *loop.o;
    for (int64_t i = 0; i < n; ++i) {
      MX_RETURN_IF_ERROR(budget_.step());
      fields[0].second.i = i + 1;
      fields[1].second.i = i;
      fields[2].second.i = n - i;
      fields[3].second.i = n - i - 1;
      fields[4].second.b = i == 0;
      fields[5].second.b = i == n - 1;
      fields[7].second = i > 0 ? xs[static_cast<size_t>(i - 1)] : Value::undefined();
      fields[8].second = i + 1 < n ? xs[static_cast<size_t>(i + 1)] : Value::undefined();
      scope_.push();
      bind(st, xs[static_cast<size_t>(i)]);
      scope_.set("loop", loop);
      Flow inner = Flow::kNormal;
      Status s = exec(st.body, out, &inner);
      // Assignments inside a loop body do not leak out (Jinja scoping), but namespace
      // attributes do, since namespaces are shared objects.
      scope_.pop();
      MX_RETURN_IF_ERROR(s);
      if (inner == Flow::kBreak) break;
    }
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

  // Every expression node passes here: one step each, plus what its result cost to build.
  Result<Value> eval(const Expr& e) {
    Nest nest(&depth_);
    MX_RETURN_IF_ERROR(check_depth(nest));
    MX_RETURN_IF_ERROR(budget_.step());
    MX_ASSIGN_OR_RETURN(Value v, eval_node(e));
    switch (e.kind) {
      case Expr::Kind::kList:
      case Expr::Kind::kDict:
      case Expr::Kind::kSlice:
      case Expr::Kind::kCall:
      case Expr::Kind::kFilter:
      case Expr::Kind::kBinary:
        MX_RETURN_IF_ERROR(budget_.built(v));
        break;
      default:
        if (v.is_string()) MX_RETURN_IF_ERROR(budget_.copied(v.s));
    }
    return v;
  }

  Result<Value> eval_node(const Expr& e) {
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
        return attribute(obj, e.name, &budget_);
      }
      case Expr::Kind::kItem: {
        MX_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
        MX_ASSIGN_OR_RETURN(Value idx, eval(*e.args[1]));
        return item(obj, idx, &budget_);
      }
      case Expr::Kind::kSlice:
        return slice(e);
      case Expr::Kind::kCall:
        return call(e);
      case Expr::Kind::kFilter: {
        MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
        MX_ASSIGN_OR_RETURN(auto a, eval_args(e, 1));
        return run_filter(e.name, v, a.first, a.second, &budget_);
      }
      case Expr::Kind::kTest: {
        MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
        MX_ASSIGN_OR_RETURN(auto a, eval_args(e, 1));
        MX_ASSIGN_OR_RETURN(bool r, run_test(e.name, v, a.first));
        return Value::boolean(r != e.negated);
      }
      case Expr::Kind::kUnary: {
        MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
        if (e.name == "not") return Value::boolean(!v.truthy());
        if (v.kind == Value::Kind::kInt) return Value::integer(wrap(0 - bits(v.i)));
        if (v.kind == Value::Kind::kFloat) return Value::floating(-v.f);
        return error("unary minus on a non-number");
      }
      case Expr::Kind::kTernary: {
        MX_ASSIGN_OR_RETURN(Value c, eval(*e.args[0]));
        return eval(*e.args[c.truthy() ? 1 : 2]);
      }
      case Expr::Kind::kBinary:
        return binary(e);
    }
    return error("unknown expression");
  }

  Result<Value> slice(const Expr& e) {
    MX_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
    int64_t bounds[3] = {0, 0, 1};
    for (int k = 0; k < 3; ++k) {
      if (!e.has_slice[k]) continue;
      MX_ASSIGN_OR_RETURN(Value v, eval(*e.args[static_cast<size_t>(k + 1)]));
      if (v.kind != Value::Kind::kInt) return error("slice bounds must be integers");
      bounds[k] = v.i;
    }
    const int64_t step = bounds[2];
    if (step == 0) return error("slice step cannot be zero");
    const int64_t n = obj.is_array()    ? static_cast<int64_t>(obj.a->size())
                      : obj.is_string() ? static_cast<int64_t>(obj.s.size())
                                        : -1;
    if (n < 0) return error("cannot slice this value");
    auto clampi = [&](int64_t v, int64_t lo, int64_t hi) { return std::max(lo, std::min(hi, v)); };
    auto index = [&](int64_t v, int64_t lo, int64_t hi) {
      return clampi(v < 0 ? (v < -n ? lo : v + n) : v, lo, hi);
    };
    int64_t start, stop;
    if (step > 0) {
      start = e.has_slice[0] ? index(bounds[0], 0, n) : 0;
      stop = e.has_slice[1] ? index(bounds[1], 0, n) : n;
    } else {
      start = e.has_slice[0] ? index(bounds[0], -1, n - 1) : n - 1;
      stop = e.has_slice[1] ? index(bounds[1], -1, n - 1) : -1;
    }
    Array a;
    std::string s;
    // Indices stay within [-1, n], so stepping cannot overflow once a huge step is cut to n + 1.
    const int64_t stride = step > 0 ? std::min(step, n + 1) : std::max(step, -(n + 1));
    for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
      if (obj.is_array())
        a.push_back((*obj.a)[static_cast<size_t>(i)]);
      else
        s += obj.s[static_cast<size_t>(i)];
    }
    return obj.is_array() ? Value::array(std::move(a)) : Value::string(std::move(s));
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
      return error("'" + what + "' is not callable");
    }
    return (*fn.fn)(a.first, a.second);
  }

  Result<Value> binary(const Expr& e);
  Result<Value> arithmetic(const std::string& op, const Value& l, const Value& r);

  // The budget outlives the scope: functions in the scope point at it.
  Budget budget_;
  Scope scope_;
  int depth_ = 0;
  int calls_ = 0;  // macro calls under way
};

Result<Value> Interpreter::binary(const Expr& e) {
  const std::string& op = e.name;
  MX_ASSIGN_OR_RETURN(Value l, eval(*e.args[0]));
  if (op == "and") return l.truthy() ? eval(*e.args[1]) : l;
  if (op == "or") return l.truthy() ? l : eval(*e.args[1]);
  MX_ASSIGN_OR_RETURN(Value r, eval(*e.args[1]));
  if (op == "==") return Value::boolean(values_equal(l, r));
  if (op == "!=") return Value::boolean(!values_equal(l, r));
  if (op == "~" || (op == "+" && l.is_string() && r.is_string())) {
    std::string a = l.is_string() ? std::move(l.s) : l.to_string();
    const std::string b = r.is_string() ? std::move(r.s) : r.to_string();
    MX_RETURN_IF_ERROR(budget_.string_fits(a.size() + b.size()));
    return Value::string(std::move(a += b));
  }
  if (op == "in" || op == "not in") {
    bool found = false;
    if (r.is_string()) {
      found = r.s.find(l.to_string()) != std::string::npos && l.is_string();
    } else if (r.is_array()) {
      MX_RETURN_IF_ERROR(budget_.step(static_cast<int64_t>(r.a->size())));
      found =
          std::any_of(r.a->begin(), r.a->end(), [&](const Value& x) { return values_equal(x, l); });
    } else if (r.is_mapping()) {
      found = !r.get(l.to_string()).is_undefined();
    }
    return Value::boolean(found == (op == "in"));
  }
  if (op == "+" && l.is_array() && r.is_array()) {
    MX_RETURN_IF_ERROR(budget_.list_fits(l.a->size() + r.a->size()));
    Array a = *l.a;
    a.insert(a.end(), r.a->begin(), r.a->end());
    return Value::array(std::move(a));
  }
  if (op == "*" && l.is_string() && r.kind == Value::Kind::kInt) {
    if (l.s.empty() || r.i <= 0) return Value::string("");
    // Checked before building: the product of two small inputs can be any size.
    if (static_cast<uint64_t>(r.i) > budget_.limits().max_output_bytes / l.s.size())
      return budget_.string_fits(budget_.limits().max_output_bytes + 1);
    std::string s;
    s.reserve(l.s.size() * static_cast<size_t>(r.i));
    for (int64_t i = 0; i < r.i; ++i) s += l.s;
    return Value::string(std::move(s));
  }
  if (l.is_string() && r.is_string()) {
    if (op == "<") return Value::boolean(l.s < r.s);
    if (op == ">") return Value::boolean(l.s > r.s);
    if (op == "<=") return Value::boolean(l.s <= r.s);
    if (op == ">=") return Value::boolean(l.s >= r.s);
  }
  if (!l.is_number() || !r.is_number()) {
    return error("operator '" + op + "' needs numbers (got " + l.to_string() + " and " +
                 r.to_string() + ")");
  }
  return arithmetic(op, l, r);
}

Result<Value> Interpreter::arithmetic(const std::string& op, const Value& l, const Value& r) {
  const bool ints = l.kind == Value::Kind::kInt && r.kind == Value::Kind::kInt;
  const double a = l.as_double(), b = r.as_double();
  if (op == "<") return Value::boolean(a < b);
  if (op == ">") return Value::boolean(a > b);
  if (op == "<=") return Value::boolean(a <= b);
  if (op == ">=") return Value::boolean(a >= b);
  if (op == "+") return ints ? Value::integer(wrap(bits(l.i) + bits(r.i))) : Value::floating(a + b);
  if (op == "-") return ints ? Value::integer(wrap(bits(l.i) - bits(r.i))) : Value::floating(a - b);
  if (op == "*") return ints ? Value::integer(wrap(bits(l.i) * bits(r.i))) : Value::floating(a * b);
  if (op == "/") return Value::floating(a / b);
  if (op == "//") {
    if (b == 0) return error("division by zero");
    return ints ? integral(std::floor(a / b)) : Value::floating(std::floor(a / b));
  }
  if (op == "%") {
    if (b == 0) return error("modulo by zero");
    if (ints) {
      if (r.i == -1) return Value::integer(0);  // INT64_MIN % -1 traps
      int64_t m = l.i % r.i;
      if (m != 0 && (m < 0) != (r.i < 0)) m += r.i;  // the sign of the divisor, as in Python
      return Value::integer(m);
    }
    return Value::floating(a - b * std::floor(a / b));
  }
  if (op == "**")
    return ints && r.i >= 0 ? integral(std::pow(a, b)) : Value::floating(std::pow(a, b));
  return error("unknown operator '" + op + "'");
}

}  // namespace
}  // namespace jinja

Result<ChatTemplate> ChatTemplate::parse(const std::string& source) {
  MX_ASSIGN_OR_RETURN(jinja::Body body, jinja::parse_template(source));
  ChatTemplate t;
  t.body_ = std::make_shared<const jinja::Body>(std::move(body));
  t.source_ = std::make_shared<const std::string>(source);
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
      if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template"))
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

namespace {

Result<std::string> render_with(
    const jinja::Body& body, const TemplateLimits& limits, const std::string& bos,
    const std::string& eos,
    const std::vector<std::pair<std::string, const nlohmann::ordered_json*>>& vars) {
  jinja::Interpreter in(limits);
  in.set("bos_token", jinja::Value::string(bos));
  in.set("eos_token", jinja::Value::string(eos));
  for (const auto& [name, j] : vars) {
    MX_ASSIGN_OR_RETURN(jinja::Value v, jinja::from_json(*j));
    in.set(name, std::move(v));
  }
  std::string out;
  MX_RETURN_IF_ERROR(in.run(body, &out));
  return out;
}

}  // namespace

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context) const {
  std::vector<std::pair<std::string, const nlohmann::ordered_json*>> vars;
  if (context.is_object()) {
    for (auto it = context.begin(); it != context.end(); ++it) vars.emplace_back(it.key(), &*it);
  }
  return render_with(*body_, limits_, bos_, eos_, vars);
}

// The same variables as render() with {messages, add_generation_prompt} merged into `extra`,
// without copying the messages into a new context first.
Result<std::string> ChatTemplate::apply(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra) const {
  const nlohmann::ordered_json agp = add_generation_prompt;
  std::vector<std::pair<std::string, const nlohmann::ordered_json*>> vars;
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) {
      if (it.key() != "messages" && it.key() != "add_generation_prompt")
        vars.emplace_back(it.key(), &*it);
    }
  }
  vars.emplace_back("messages", &messages);
  vars.emplace_back("add_generation_prompt", &agp);
  return render_with(*body_, limits_, bos_, eos_, vars);
}

}  // namespace mx
