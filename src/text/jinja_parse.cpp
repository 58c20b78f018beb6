#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "text/jinja_ast.h"

namespace mx::jinja {
namespace {

std::string preprocess(std::string s) {
  if (!s.empty() && s.back() == '\n') s.pop_back();
  // lstrip_blocks: spaces and tabs at a line start before "{%", "{#" or "{-" go.
  std::string a;
  a.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    if (i == 0 || s[i - 1] == '\n') {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' &&
          (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        i = j;
      }
    }
    a += s[i++];
  }
  // trim_blocks: a newline right after "%}", "#}" or "-}" goes.
  std::string b;
  b.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (i + 2 < a.size() + 0 && (a[i] == '#' || a[i] == '%' || a[i] == '-') && a[i + 1] == '}' &&
        a[i + 2] == '\n') {
      b += a[i];
      b += '}';
      i += 2;
      continue;
    }
    b += a[i];
  }
  return b;
}

struct Tok {
  enum Type { kName, kString, kInt, kFloat, kOp, kEnd } type;
  std::string text;
  int64_t i = 0;
  double f = 0;
};

// An integer or float literal at src[*p]; "x.0" after a dot is an integer index.
Status lex_number(const std::string& src, size_t* p, std::vector<Tok>* out) {
  size_t q = *p;
  while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) ++q;
  const bool prev_dot = !out->empty() && out->back().type == Tok::kOp && out->back().text == ".";
  if (!prev_dot && q + 1 < src.size() && src[q] == '.' &&
      std::isdigit(static_cast<unsigned char>(src[q + 1]))) {
    ++q;
    while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) ++q;
    Tok t{Tok::kFloat, src.substr(*p, q - *p)};
    t.f = std::strtod(t.text.c_str(), nullptr);  // overflow gives inf, as in JavaScript
    out->push_back(t);
  } else {
    Tok t{Tok::kInt, src.substr(*p, q - *p)};
    const auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), t.i);
    if (ec != std::errc() || end != t.text.data() + t.text.size())
      return invalid_argument("chat template: integer literal " + t.text + " is out of range");
    out->push_back(t);
  }
  *p = q;
  return Status::ok();
}

Result<std::vector<Tok>> lex_expr(const std::string& src) {
  std::vector<Tok> out;
  size_t p = 0;
  while (p < src.size()) {
    const char c = src[p];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++p;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t q = p;
      while (q < src.size() && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_'))
        ++q;
      out.push_back({Tok::kName, src.substr(p, q - p)});
      p = q;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      MX_RETURN_IF_ERROR(lex_number(src, &p, &out));
    } else if (c == '\'' || c == '"') {
      std::string s;
      size_t q = p + 1;
      for (; q < src.size() && src[q] != c; ++q) {
        if (src[q] == '\\' && q + 1 < src.size()) {
          const char e = src[++q];
          switch (e) {
            case 'n':
              s += '\n';
              break;
            case 't':
              s += '\t';
              break;
            case 'r':
              s += '\r';
              break;
            case 'b':
              s += '\b';
              break;
            case 'f':
              s += '\f';
              break;
            case 'v':
              s += '\v';
              break;
            default:
              s += e;
          }
        } else {
          s += src[q];
        }
      }
      if (q >= src.size()) return invalid_argument("chat template: unterminated string literal");
      out.push_back({Tok::kString, s});
      p = q + 1;
    } else {
      static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                   "/",  "%",  "<",  ">",  "(",  ")",  "[", "]", "{",
                                   "}",  ",",  ".",  ":",  "|",  "=",  "~"};
      bool found = false;
      for (const char* op : kOps) {
        const size_t n = std::char_traits<char>::length(op);
        if (src.compare(p, n, op) == 0) {
          out.push_back({Tok::kOp, op});
          p += n;
          found = true;
          break;
        }
      }
      if (!found)
        return invalid_argument(std::string("chat template: unexpected character '") + c + "'");
    }
  }
  out.push_back({Tok::kEnd, ""});
  return out;
}

class ExprParser {
 public:
  explicit ExprParser(std::vector<Tok> toks) : t_(std::move(toks)) {}

  Result<ExprPtr> parse_all() {
    MX_ASSIGN_OR_RETURN(ExprPtr e, ternary());
    if (t_[p_].type != Tok::kEnd) return error("unexpected '" + t_[p_].text + "'");
    return e;
  }
  bool at_end() const { return t_[p_].type == Tok::kEnd; }
  bool accept_name(const char* n) {
    if (t_[p_].type == Tok::kName && t_[p_].text == n) {
      ++p_;
      return true;
    }
    return false;
  }
  bool peek_op(const char* o) const { return t_[p_].type == Tok::kOp && t_[p_].text == o; }
  bool accept_op(const char* o) {
    if (t_[p_].type == Tok::kOp && t_[p_].text == o) {
      ++p_;
      return true;
    }
    return false;
  }
  Result<std::string> name() {
    if (t_[p_].type != Tok::kName) return error("expected a name");
    return t_[p_++].text;
  }
  Result<ExprPtr> ternary() {
    Nest nest(&nest_);
    if (nest_ > kMaxNesting) return too_deep();
    MX_ASSIGN_OR_RETURN(ExprPtr a, or_expr());
    // "a if cond else b"; a bare "x if cond" (no else) yields undefined otherwise.
    if (t_[p_].type == Tok::kName && t_[p_].text == "if" && !no_ternary_) {
      ++p_;
      MX_ASSIGN_OR_RETURN(ExprPtr cond, or_expr());
      ExprPtr b;
      if (accept_name("else")) {
        MX_ASSIGN_OR_RETURN(b, ternary());
      } else {
        b = literal(Value::undefined());
      }
      return checked(node(Expr::Kind::kTernary, "", std::move(cond), std::move(a), std::move(b)));
    }
    return a;
  }
  Result<ExprPtr> or_expr() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, and_expr());
    while (accept_name("or")) {
      MX_ASSIGN_OR_RETURN(ExprPtr b, and_expr());
      MX_ASSIGN_OR_RETURN(a, checked(node(Expr::Kind::kBinary, "or", std::move(a), std::move(b))));
    }
    return a;
  }
  Result<ExprPtr> and_expr() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, not_expr());
    while (accept_name("and")) {
      MX_ASSIGN_OR_RETURN(ExprPtr b, not_expr());
      MX_ASSIGN_OR_RETURN(a, checked(node(Expr::Kind::kBinary, "and", std::move(a), std::move(b))));
    }
    return a;
  }
  Result<ExprPtr> not_expr() {
    if (accept_name("not")) {
      Nest nest(&nest_);
      if (nest_ > kMaxNesting) return too_deep();
      MX_ASSIGN_OR_RETURN(ExprPtr a, not_expr());
      return checked(node(Expr::Kind::kUnary, "not", std::move(a)));
    }
    return compare();
  }
  Result<ExprPtr> compare() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, concat());
    for (;;) {
      static const char* kCmp[] = {"==", "!=", "<=", ">=", "<", ">"};
      bool done = true;
      for (const char* op : kCmp) {
        if (accept_op(op)) {
          MX_ASSIGN_OR_RETURN(ExprPtr b, concat());
          MX_ASSIGN_OR_RETURN(a,
                              checked(node(Expr::Kind::kBinary, op, std::move(a), std::move(b))));
          done = false;
          break;
        }
      }
      if (!done) continue;
      if (accept_name("in")) {
        MX_ASSIGN_OR_RETURN(ExprPtr b, concat());
        MX_ASSIGN_OR_RETURN(a,
                            checked(node(Expr::Kind::kBinary, "in", std::move(a), std::move(b))));
      } else if (t_[p_].type == Tok::kName && t_[p_].text == "not" && t_[p_ + 1].text == "in") {
        p_ += 2;
        MX_ASSIGN_OR_RETURN(ExprPtr b, concat());
        MX_ASSIGN_OR_RETURN(
            a, checked(node(Expr::Kind::kBinary, "not in", std::move(a), std::move(b))));
      } else if (accept_name("is")) {
        const bool neg = accept_name("not");
        std::string test;
        if (t_[p_].type == Tok::kName) {
          test = t_[p_++].text;
        } else {
          return error("expected a test name after 'is'");
        }
        auto e = node(Expr::Kind::kTest, test, std::move(a));
        e->negated = neg;
        // One-argument tests: "is equalto 3", "is sameas x", or "is divisibleby(3)".
        if (accept_op("(")) {
          MX_RETURN_IF_ERROR(call_args(e.get()));
        } else if (t_[p_].type == Tok::kInt || t_[p_].type == Tok::kString ||
                   t_[p_].type == Tok::kFloat) {
          MX_ASSIGN_OR_RETURN(ExprPtr arg, primary());
          e->args.push_back(std::move(arg));
        }
        MX_ASSIGN_OR_RETURN(a, checked(std::move(e)));
      } else {
        return a;
      }
    }
  }
  Result<ExprPtr> concat() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, additive());
    while (accept_op("~")) {
      MX_ASSIGN_OR_RETURN(ExprPtr b, additive());
      MX_ASSIGN_OR_RETURN(a, checked(node(Expr::Kind::kBinary, "~", std::move(a), std::move(b))));
    }
    return a;
  }
  Result<ExprPtr> additive() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, multiplicative());
    for (;;) {
      const char* op = accept_op("+") ? "+" : accept_op("-") ? "-" : nullptr;
      if (op == nullptr) return a;
      MX_ASSIGN_OR_RETURN(ExprPtr b, multiplicative());
      MX_ASSIGN_OR_RETURN(a, checked(node(Expr::Kind::kBinary, op, std::move(a), std::move(b))));
    }
  }
  Result<ExprPtr> multiplicative() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, unary());
    for (;;) {
      const char* op = accept_op("*")    ? "*"
                       : accept_op("//") ? "//"
                       : accept_op("/")  ? "/"
                       : accept_op("%")  ? "%"
                                         : nullptr;
      if (op == nullptr) return a;
      MX_ASSIGN_OR_RETURN(ExprPtr b, unary());
      MX_ASSIGN_OR_RETURN(a, checked(node(Expr::Kind::kBinary, op, std::move(a), std::move(b))));
    }
  }
  Result<ExprPtr> unary() {
    const bool minus = accept_op("-");
    if (minus || accept_op("+")) {
      Nest nest(&nest_);
      if (nest_ > kMaxNesting) return too_deep();
      MX_ASSIGN_OR_RETURN(ExprPtr a, unary());
      if (!minus) return a;
      return checked(node(Expr::Kind::kUnary, "-", std::move(a)));
    }
    return power();
  }
  Result<ExprPtr> power() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, filtered());
    if (accept_op("**")) {
      Nest nest(&nest_);
      if (nest_ > kMaxNesting) return too_deep();
      MX_ASSIGN_OR_RETURN(ExprPtr b, unary());
      return checked(node(Expr::Kind::kBinary, "**", std::move(a), std::move(b)));
    }
    return a;
  }
  Result<ExprPtr> filtered() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, postfix());
    while (accept_op("|")) {
      MX_ASSIGN_OR_RETURN(std::string f, name());
      auto e = node(Expr::Kind::kFilter, f, std::move(a));
      if (accept_op("(")) MX_RETURN_IF_ERROR(call_args(e.get()));
      MX_ASSIGN_OR_RETURN(a, checked(std::move(e)));
    }
    return a;
  }
  Result<ExprPtr> postfix() {
    MX_ASSIGN_OR_RETURN(ExprPtr a, primary());
    for (;;) {
      if (accept_op(".")) {
        if (t_[p_].type == Tok::kInt) {  // x.0 as in Jinja
          MX_ASSIGN_OR_RETURN(a, checked(node(Expr::Kind::kItem, "", std::move(a),
                                              literal(Value::integer(t_[p_++].i)))));
          continue;
        }
        MX_ASSIGN_OR_RETURN(std::string n, name());
        MX_ASSIGN_OR_RETURN(a, checked(node(Expr::Kind::kAttr, n, std::move(a))));
      } else if (accept_op("[")) {
        ExprPtr parts[3];
        bool has[3] = {false, false, false};
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (t_[p_].text != ":" && t_[p_].text != "]") {
            MX_ASSIGN_OR_RETURN(parts[k], ternary());
            has[k] = true;
          }
          if (k < 2 && accept_op(":")) {
            slice = true;
            continue;
          }
          break;
        }
        if (!accept_op("]")) return error("expected ']'");
        if (!slice) {
          if (!has[0]) return error("empty subscript");
          MX_ASSIGN_OR_RETURN(
              a, checked(node(Expr::Kind::kItem, "", std::move(a), std::move(parts[0]))));
        } else {
          auto e = node(Expr::Kind::kSlice, "", std::move(a));
          for (int k = 0; k < 3; ++k) {
            e->has_slice[k] = has[k];
            e->args.push_back(has[k] ? std::move(parts[k]) : literal(Value::null()));
          }
          MX_ASSIGN_OR_RETURN(a, checked(std::move(e)));
        }
      } else if (accept_op("(")) {
        auto e = node(Expr::Kind::kCall, "", std::move(a));
        MX_RETURN_IF_ERROR(call_args(e.get()));
        MX_ASSIGN_OR_RETURN(a, checked(std::move(e)));
      } else {
        return a;
      }
    }
  }
  Result<ExprPtr> primary() {
    const Tok& t = t_[p_];
    switch (t.type) {
      case Tok::kInt:
        ++p_;
        return literal(Value::integer(t.i));
      case Tok::kFloat:
        ++p_;
        return literal(Value::floating(t.f));
      case Tok::kString: {
        std::string s = t_[p_++].text;
        while (t_[p_].type == Tok::kString) s += t_[p_++].text;  // adjacent literals join
        return literal(Value::string(s));
      }
      case Tok::kName: {
        ++p_;
        if (t.text == "true" || t.text == "True") return literal(Value::boolean(true));
        if (t.text == "false" || t.text == "False") return literal(Value::boolean(false));
        if (t.text == "none" || t.text == "None") return literal(Value::null());
        auto e = std::make_unique<Expr>();
        e->kind = Expr::Kind::kName;
        e->name = t.text;
        return e;
      }
      case Tok::kOp:
        if (accept_op("(")) {
          MX_ASSIGN_OR_RETURN(ExprPtr e, ternary());
          if (accept_op(",")) {  // a tuple: evaluated as a list
            auto l = node(Expr::Kind::kList, "", std::move(e));
            while (!accept_op(")")) {
              MX_ASSIGN_OR_RETURN(ExprPtr x, ternary());
              l->args.push_back(std::move(x));
              if (!accept_op(",") && t_[p_].text != ")") return error("expected ',' or ')'");
            }
            return checked(std::move(l));
          }
          if (!accept_op(")")) return error("expected ')'");
          return e;
        }
        if (accept_op("[")) {
          auto l = std::make_unique<Expr>();
          l->kind = Expr::Kind::kList;
          while (!accept_op("]")) {
            MX_ASSIGN_OR_RETURN(ExprPtr x, ternary());
            l->args.push_back(std::move(x));
            if (!accept_op(",") && t_[p_].text != "]") return error("expected ',' or ']'");
          }
          return checked(std::move(l));
        }
        if (accept_op("{")) {
          auto d = std::make_unique<Expr>();
          d->kind = Expr::Kind::kDict;
          while (!accept_op("}")) {
            MX_ASSIGN_OR_RETURN(ExprPtr k, ternary());
            if (!accept_op(":")) return error("expected ':' in a dict literal");
            MX_ASSIGN_OR_RETURN(ExprPtr v, ternary());
            d->args.push_back(std::move(k));
            d->args.push_back(std::move(v));
            if (!accept_op(",") && t_[p_].text != "}") return error("expected ',' or '}'");
          }
          return checked(std::move(d));
        }
        break;
      case Tok::kEnd:
        return error("unexpected end of expression");
    }
    return error("unexpected '" + t.text + "'");
  }
  void set_no_ternary(bool v) { no_ternary_ = v; }

 private:
  Status call_args(Expr* e) {
    while (!accept_op(")")) {
      if (t_[p_].type == Tok::kName && t_[p_ + 1].type == Tok::kOp && t_[p_ + 1].text == "=") {
        std::string k = t_[p_].text;
        p_ += 2;
        MX_ASSIGN_OR_RETURN(ExprPtr v, ternary());
        e->kwargs.emplace_back(std::move(k), std::move(v));
      } else {
        MX_ASSIGN_OR_RETURN(ExprPtr v, ternary());
        e->args.push_back(std::move(v));
      }
      if (!accept_op(",") && t_[p_].text != ")") return error("expected ',' or ')' in a call");
    }
    return Status::ok();
  }
  static ExprPtr literal(Value v) {
    auto e = std::make_unique<Expr>();
    e->kind = Expr::Kind::kLiteral;
    e->literal = std::move(v);
    return e;
  }
  // Left-leaning chains ("a + b + c ...", "x.y.z ...", "s | trim | trim ...") deepen the tree
  // without deepening the parser's recursion, so depth is also counted on the nodes.
  Result<ExprPtr> checked(ExprPtr e) const {
    for (const ExprPtr& a : e->args) e->depth = std::max(e->depth, a->depth + 1);
    for (const auto& [k, v] : e->kwargs) e->depth = std::max(e->depth, v->depth + 1);
    if (e->depth > kMaxNesting) return too_deep();
    return e;
  }
  Status too_deep() const {
    return error("expression nesting depth limit: more than " + std::to_string(kMaxNesting) +
                 " levels");
  }
  static ExprPtr node(Expr::Kind k, std::string name, ExprPtr a, ExprPtr b = nullptr,
                      ExprPtr c = nullptr) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->name = std::move(name);
    e->args.push_back(std::move(a));
    if (b) e->args.push_back(std::move(b));
    if (c) e->args.push_back(std::move(c));
    return e;
  }
  Status error(const std::string& msg) const { return invalid_argument("chat template: " + msg); }

  std::vector<Tok> t_;
  size_t p_ = 0;
  bool no_ternary_ = false;
  // Recursion levels: one per parenthesis, bracket, call, "else", "not", sign or "**" that
  // encloses the current token.
  int nest_ = 0;
};

struct Segment {
  enum Type { kText, kExpr, kStmt } type;
  std::string text;
};

Result<std::vector<Segment>> split(const std::string& src) {
  std::vector<Segment> segs;
  size_t p = 0;
  bool strip_next = false;
  while (p < src.size()) {
    size_t open = src.find('{', p);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    std::string text = src.substr(
        p, (open == std::string::npos || open + 1 >= src.size() ? src.size() : open) - p);
    if (strip_next) {
      size_t k = 0;
      while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) ++k;
      text.erase(0, k);
    }
    strip_next = false;
    if (open == std::string::npos || open + 1 >= src.size()) {
      if (!text.empty()) segs.push_back({Segment::kText, text});
      break;
    }
    const char kind = src[open + 1];
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    size_t inner = open + 2;
    if (inner < src.size() && src[inner] == '-') {
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.pop_back();
      ++inner;
    }
    if (!text.empty()) segs.push_back({Segment::kText, text});
    const size_t end = src.find(close, inner);
    if (end == std::string::npos)
      return invalid_argument("chat template: unclosed '{" + std::string(1, kind) + "'");
    size_t inner_end = end;
    if (inner_end > inner && src[inner_end - 1] == '-') {
      --inner_end;
      strip_next = true;
    }
    if (kind != '#') {
      segs.push_back(
          {kind == '{' ? Segment::kExpr : Segment::kStmt, src.substr(inner, inner_end - inner)});
    }
    p = end + 2;
  }
  return segs;
}

class StmtParser {
 public:
  explicit StmtParser(std::vector<Segment> s) : segs_(std::move(s)) {}

  // Parses until one of `stops` (a statement keyword) or the end; returns the stop found.
  Result<std::string> body(Body* out, const std::vector<std::string>& stops) {
    while (i_ < segs_.size()) {
      const Segment& s = segs_[i_];
      if (s.type == Segment::kText) {
        auto st = std::make_unique<Stmt>();
        st->kind = Stmt::Kind::kText;
        st->text = s.text;
        out->push_back(std::move(st));
        ++i_;
        continue;
      }
      MX_ASSIGN_OR_RETURN(auto toks, lex_expr(s.text));
      if (s.type == Segment::kExpr) {
        ++i_;
        ExprParser ep(std::move(toks));
        auto st = std::make_unique<Stmt>();
        st->kind = Stmt::Kind::kOutput;
        MX_ASSIGN_OR_RETURN(st->expr, ep.parse_all());
        out->push_back(std::move(st));
        continue;
      }
      const std::string kw = toks[0].type == Tok::kName ? toks[0].text : "";
      for (const std::string& stop : stops) {
        if (kw == stop) return kw;
      }
      ++i_;
      ExprParser ep(std::move(toks));
      ep.accept_name(kw.c_str());
      if (kw == "if") {
        MX_RETURN_IF_ERROR(parse_if(ep, out));
      } else if (kw == "for") {
        MX_RETURN_IF_ERROR(parse_for(ep, out));
      } else if (kw == "set") {
        MX_RETURN_IF_ERROR(parse_set(ep, out));
      } else if (kw == "macro" || kw == "call") {
        MX_RETURN_IF_ERROR(parse_macro(kw, ep, out));
      } else if (kw == "break" || kw == "continue") {
        auto st = std::make_unique<Stmt>();
        st->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
        out->push_back(std::move(st));
      } else if (kw == "generation" || kw == "endgeneration") {
        continue;  // training markers: no output of their own
      } else {
        return invalid_argument("chat template: unsupported statement '{% " + s.text + " %}'");
      }
    }
    if (!stops.empty())
      return invalid_argument("chat template: missing '{% " + stops.back() + " %}'");
    return std::string();
  }

 private:
  Status parse_if(ExprParser& ep, Body* out) {
    Nest nest(&nest_);
    if (nest_ > kMaxNesting) return too_deep();
    auto st = std::make_unique<Stmt>();
    st->kind = Stmt::Kind::kIf;
    MX_ASSIGN_OR_RETURN(ExprPtr cond, ep.parse_all());
    for (;;) {
      Body b;
      MX_ASSIGN_OR_RETURN(std::string stop, body(&b, {"elif", "else", "endif"}));
      st->branches.emplace_back(std::move(cond), std::move(b));
      MX_ASSIGN_OR_RETURN(auto toks, lex_expr(segs_[i_++].text));
      if (stop == "endif") break;
      if (stop == "else") {
        MX_ASSIGN_OR_RETURN(std::string end, body(&st->else_body, {"endif"}));
        (void)end;
        ++i_;
        break;
      }
      ExprParser cp(std::move(toks));
      cp.accept_name("elif");
      MX_ASSIGN_OR_RETURN(cond, cp.parse_all());
    }
    out->push_back(std::move(st));
    return Status::ok();
  }
  Status parse_for(ExprParser& ep, Body* out) {
    Nest nest(&nest_);
    if (nest_ > kMaxNesting) return too_deep();
    auto st = std::make_unique<Stmt>();
    st->kind = Stmt::Kind::kFor;
    do {
      MX_ASSIGN_OR_RETURN(std::string n, ep.name());
      st->targets.push_back(n);
    } while (ep.accept_op(","));
    if (!ep.accept_name("in"))
      return invalid_argument("chat template: expected 'in' in a for loop");
    ep.set_no_ternary(true);  // "for x in xs if cond" is a filter, not a ternary
    MX_ASSIGN_OR_RETURN(st->expr, ep.ternary());
    if (ep.accept_name("if")) {
      ep.set_no_ternary(false);
      MX_ASSIGN_OR_RETURN(st->filter, ep.ternary());
    }
    if (!ep.at_end()) return invalid_argument("chat template: unexpected tokens in a for loop");
    MX_ASSIGN_OR_RETURN(std::string stop, body(&st->body, {"else", "endfor"}));
    ++i_;
    if (stop == "else") {
      MX_ASSIGN_OR_RETURN(std::string end, body(&st->else_body, {"endfor"}));
      (void)end;
      ++i_;
    }
    out->push_back(std::move(st));
    return Status::ok();
  }
  Status parse_set(ExprParser& ep, Body* out) {
    auto st = std::make_unique<Stmt>();
    st->kind = Stmt::Kind::kSet;
    MX_ASSIGN_OR_RETURN(std::string n, ep.name());
    st->targets.push_back(n);
    if (ep.accept_op(".")) {
      MX_ASSIGN_OR_RETURN(std::string attr, ep.name());
      st->targets.push_back(attr);
      st->set_attr = true;
    }
    if (ep.at_end() && !st->set_attr) {  // {% set name %}...{% endset %}
      Nest nest(&nest_);
      if (nest_ > kMaxNesting) return too_deep();
      st->kind = Stmt::Kind::kSetBlock;
      MX_ASSIGN_OR_RETURN(std::string end, body(&st->body, {"endset"}));
      (void)end;
      ++i_;
      out->push_back(std::move(st));
      return Status::ok();
    }
    if (!ep.accept_op("=")) return invalid_argument("chat template: expected '=' in a set");
    MX_ASSIGN_OR_RETURN(st->expr, ep.parse_all());
    out->push_back(std::move(st));
    return Status::ok();
  }
  // "(a, b=default, ...)" after the opening parenthesis: a macro's or a caller's parameters.
  static Status parse_params(ExprParser& ep, Stmt* st) {
    while (!ep.accept_op(")")) {
      MX_ASSIGN_OR_RETURN(std::string name, ep.name());
      for (const auto& [n, d] : st->params) {
        if (n == name) return invalid_argument("chat template: duplicate parameter '" + name + "'");
      }
      ExprPtr def;
      if (ep.accept_op("=")) {
        MX_ASSIGN_OR_RETURN(def, ep.ternary());
      }
      st->params.emplace_back(std::move(name), std::move(def));
      if (!ep.accept_op(",") && !ep.peek_op(")"))
        return invalid_argument("chat template: expected ',' or ')' in a parameter list");
    }
    return Status::ok();
  }
  // {% macro name(params) %}...{% endmacro %} and {% call(params) macro(args) %}...{% endcall %}.
  Status parse_macro(const std::string& kw, ExprParser& ep, Body* out) {
    Nest nest(&nest_);
    if (nest_ > kMaxNesting) return too_deep();
    auto st = std::make_unique<Stmt>();
    const bool call = kw == "call";
    st->kind = call ? Stmt::Kind::kCallBlock : Stmt::Kind::kMacro;
    if (call) {
      st->targets.push_back("caller");
      if (ep.accept_op("(")) MX_RETURN_IF_ERROR(parse_params(ep, st.get()));
      MX_ASSIGN_OR_RETURN(st->expr, ep.parse_all());
      if (st->expr->kind != Expr::Kind::kCall)
        return invalid_argument("chat template: '{% call %}' needs a macro call");
    } else {
      MX_ASSIGN_OR_RETURN(std::string name, ep.name());
      st->targets.push_back(name);
      if (!ep.accept_op("("))
        return invalid_argument("chat template: expected '(' after macro '" + name + "'");
      MX_RETURN_IF_ERROR(parse_params(ep, st.get()));
      if (!ep.at_end())
        return invalid_argument("chat template: unexpected tokens after macro '" + name + "'");
    }
    MX_ASSIGN_OR_RETURN(std::string end, body(&st->body, {call ? "endcall" : "endmacro"}));
    (void)end;
    ++i_;
    out->push_back(std::move(st));
    return Status::ok();
  }

  static Status too_deep() {
    return invalid_argument("chat template: block nesting depth limit: more than " +
                            std::to_string(kMaxNesting) + " levels of blocks");
  }

  std::vector<Segment> segs_;
  size_t i_ = 0;
  int nest_ = 0;
};

}  // namespace

Result<Body> parse_template(const std::string& source) {
  MX_ASSIGN_OR_RETURN(auto segs, split(preprocess(source)));
  StmtParser p(std::move(segs));
  Body b;
  MX_ASSIGN_OR_RETURN(std::string stop, p.body(&b, {}));
  if (!stop.empty()) return invalid_argument("chat template: unexpected '{% " + stop + " %}'");
  return b;
}

}  // namespace mx::jinja
