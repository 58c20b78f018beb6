// Parsed form of a Jinja template (internal to the loader's template engine).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace mx::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

// Blocks nest at most this deep, and so do expressions (parentheses, operands, filter chains):
// the parser, the evaluator and the trees' destructors all recurse, and a template nested
// deeper would overflow the stack instead of failing.
constexpr int kMaxNesting = 256;

struct Expr {
  enum class Kind {
    kLiteral,
    kName,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kUnary,
    kBinary,
    kTernary,
    kList,
    kDict,
  };
  Kind kind;
  Value literal;
  std::string name;           // name, attribute, filter, test or operator
  std::vector<ExprPtr> args;  // operands, call/filter arguments, list items
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  int depth = 1;         // this node and the deepest chain of operands under it
  bool negated = false;  // "is not"
  bool has_slice[3] = {false, false, false};
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  // kMacro: `{% macro name(params) %}body{% endmacro %}`. kCallBlock: `{% call(params)
  // expr %}body{% endcall %}`, whose body is the `caller` that the called macro may call.
  // kSetBlock: `{% set name %}body{% endset %}`.
  enum class Kind {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kBreak,
    kContinue,
    kMacro,
    kCallBlock
  };
  Kind kind;
  std::string text;
  ExprPtr expr;                                    // output, set value, for iterable, call
  std::vector<std::pair<ExprPtr, Body>> branches;  // if / elif
  Body body, else_body;              // for body and else; if else; macro, call and set block bodies
  std::vector<std::string> targets;  // for loop names; set target ("ns", "attr"); macro name
  ExprPtr filter;                    // for ... if cond
  // Macro and caller parameters in order, each with its default (null when it has none).
  std::vector<std::pair<std::string, ExprPtr>> params;
  bool set_attr = false;
};

// Parses a whole template after the reference renderer's preprocessing (trailing newline,
// lstrip_blocks, trim_blocks).
Result<Body> parse_template(const std::string& source);

// Counts one level of nesting (parser recursion, evaluation) for as long as it lives.
class Nest {
 public:
  explicit Nest(int* depth) : depth_(depth) { ++*depth_; }
  ~Nest() { --*depth_; }
  Nest(const Nest&) = delete;
  Nest& operator=(const Nest&) = delete;
  int depth() const { return *depth_; }

 private:
  int* depth_;
};

}  // namespace mx::jinja
