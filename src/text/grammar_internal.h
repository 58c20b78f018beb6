// Private to the grammar engine: the expression IR the front ends (JSON schema, regex,
// choices, sequences) build, and the compiled form the matcher runs.
//
// A grammar is a set of rules over bytes. Each rule compiles to an epsilon-free NFA whose
// edges read a byte range or call another rule (a call pushes the return state). The front
// ends inline everything that is not recursive, so calls appear only for $ref targets and for
// the containers of unconstrained JSON; that keeps most of a document inside one rule,
// where the matcher's per-position token masks need no knowledge of the stack below.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "text/grammar.h"

namespace mx::grammar {

// Bounds that keep a hostile schema or regex from exhausting memory or time: the compiled
// NFA states of all rules, the rules, the IR nodes, a regex repetition count, and the
// nesting of a schema (recursion in the compiler).
constexpr int32_t kMaxStates = 200000;
static_assert(kMaxStates < (1 << 20), "state ids fill 20 bits of a mask cache key");
constexpr int32_t kMaxRules = 4096;
constexpr int32_t kMaxExprs = 400000;
constexpr int32_t kMaxRepeat = 10000;
constexpr int32_t kMaxSchemaDepth = 64;
// Epsilon elimination copies the edges of each closure; chains of optional parts such as
// (a?){5000} make that quadratic, so the copied edges and the closure work are bounded too.
constexpr size_t kMaxEdges = 2000000;
constexpr size_t kMaxClosureWork = 2000000;
// Parser stacks alive at once. Only a grammar ambiguous across nested rules (alternatives
// that reach different rules with a common prefix, recursively) comes near it; past it the
// surplus stacks are dropped, which narrows such a grammar instead of stalling the server.
constexpr size_t kMaxStacks = 4096;

struct ByteSet {
  std::array<uint64_t, 4> w{};
  void add(int lo, int hi) {
    for (int b = lo; b <= hi; ++b) w[b >> 6] |= uint64_t{1} << (b & 63);
  }
  bool has(int b) const { return (w[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (w[0] | w[1] | w[2] | w[3]) == 0; }
  ByteSet& operator|=(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) w[i] |= o.w[i];
    return *this;
  }
};

struct Expr {
  enum class Kind : uint8_t { kBytes, kSeq, kAlt, kRepeat, kRef, kObject };
  Kind kind = Kind::kSeq;
  ByteSet bytes;                  // kBytes
  std::vector<int32_t> kids;      // kSeq, kAlt; kRepeat: the body; kObject: the members
  std::vector<uint8_t> required;  // kObject: per member
  int32_t extra = -1;             // kObject: a member that may repeat after the listed ones
  int32_t sep = -1;               // kObject: what joins members
  int32_t min = 0, max = 0;       // kRepeat; max < 0 is unbounded
  int32_t rule = -1;              // kRef
};

// Builds the IR. The first limit exceeded is kept in status() and further nodes are
// placeholders, so the front ends check once at the end (and at recursion points).
class ExprBuilder {
 public:
  int32_t bytes(const ByteSet& set);
  int32_t range(int lo, int hi);
  int32_t literal(std::string_view s);
  int32_t seq(std::vector<int32_t> kids);
  int32_t alt(std::vector<int32_t> kids);
  int32_t repeat(int32_t body, int32_t min, int32_t max);
  int32_t opt(int32_t body) { return repeat(body, 0, 1); }
  int32_t empty() { return seq({}); }
  int32_t ref(int32_t rule);
  int32_t object(std::vector<int32_t> members, std::vector<uint8_t> required, int32_t extra,
                 int32_t sep);

  // A rule to be referenced before its body is known (recursion); -1 past the limit.
  int32_t new_rule(std::string name);
  void set_body(int32_t rule, int32_t expr) { rule_body_[rule] = expr; }

  const Expr& expr(int32_t id) const { return exprs_[id]; }
  int32_t num_rules() const { return static_cast<int32_t>(rule_body_.size()); }
  int32_t body(int32_t rule) const { return rule_body_[rule]; }
  const std::string& rule_name(int32_t rule) const { return rule_names_[rule]; }
  const Status& status() const { return status_; }
  void fail(Status s) {
    if (status_.is_ok()) status_ = std::move(s);
  }

  // Rules shared by the front ends (the containers of any JSON value) by name, and a
  // counter that tells apart the schemas of one grammar (each resolves its own $refs).
  std::unordered_map<std::string, int32_t> memo;
  int32_t schemas = 0;

 private:
  int32_t add(Expr e);

  std::vector<Expr> exprs_;
  std::vector<int32_t> rule_body_;
  std::vector<std::string> rule_names_;
  Status status_;
};

// Front ends, each adding to `b` and returning the expression of its language.
// JSON text valid against `schema` (the compact format described in grammar_json_schema.cpp).
Result<int32_t> json_schema_expr(ExprBuilder& b, const nlohmann::ordered_json& schema);
// The schema a chain of local $refs leads to (s itself without one).
Result<const nlohmann::ordered_json*> resolve_ref(const nlohmann::ordered_json& root,
                                                  const nlohmann::ordered_json& s,
                                                  const std::string& path);
// `s` (which holds an allOf) as one schema with the same values; $refs resolved against root.
Result<nlohmann::ordered_json> merge_all_of(const nlohmann::ordered_json& root,
                                            const nlohmann::ordered_json& s, int depth,
                                            const std::string& path);
// Any JSON value (nested objects and arrays through two recursive rules).
int32_t any_json_value_expr(ExprBuilder& b);
// Any JSON object.
int32_t any_json_object_expr(ExprBuilder& b);
// What `regex` matches, whole. `json_safe` keeps out the bytes a JSON string would have to
// escape (quote, backslash, control characters), for the `pattern` keyword.
Result<int32_t> regex_expr(ExprBuilder& b, std::string_view regex, bool json_safe);
// Digit counts of a JSON number the schema grammars allow (see grammar_numbers.cpp).
constexpr int32_t kMaxIntDigits = 16;
constexpr int32_t kMaxFracDigits = 16;
constexpr int32_t kMaxExpDigits = 3;
// Bounds of a number, each end inclusive unless marked strict; absent ends are open.
struct NumberBounds {
  std::optional<double> lo, hi;
  bool lo_strict = false, hi_strict = false;
};
// Any JSON number within the digit counts.
int32_t any_number_expr(ExprBuilder& b);
// The integers (or, with `integer` false, the exponent-free decimals) within `r`; an error
// naming `path` when there is none.
Result<int32_t> number_range_expr(ExprBuilder& b, const NumberBounds& r, bool integer,
                                  const std::string& path);
// The fewest and most code points (hi -1: unbounded) of the UTF-8 texts `e` admits; a byte
// set without lead bytes (continuations only) counts as no code point.
std::pair<int64_t, int64_t> char_length_range(const ExprBuilder& b, int32_t e);
// UTF-8 of the code points in [lo, hi] (surrogates excluded), as alternatives of byte ranges.
int32_t utf8_range_expr(ExprBuilder& b, uint32_t lo, uint32_t hi);

// Compiled form: states of all rules numbered globally.
struct ByteEdge {
  uint8_t lo, hi;
  int32_t target;
};
struct CallEdge {
  int32_t rule;
  int32_t ret;  // the caller's state after the callee completes
};
struct NfaState {
  uint32_t byte_begin = 0, byte_end = 0;
  uint32_t call_begin = 0, call_end = 0;
  bool final = false;
};

// Per grammar position (an NFA state on top of the stack) and vocabulary: the tokens accepted
// whatever lies below on the stack, and those that leave the rule mid-token and so must be
// checked against the whole stack.
struct PositionMasks {
  std::vector<uint32_t> bits;      // a bitset over the vocabulary, or empty when `list` is used
  std::vector<int32_t> list;       // accepted tokens when few
  std::vector<int32_t> uncertain;  // context-dependent tokens
};

}  // namespace mx::grammar

namespace mx {

class Grammar {
 public:
  std::vector<grammar::NfaState> states;
  std::vector<grammar::ByteEdge> byte_edges;
  std::vector<grammar::CallEdge> call_edges;
  std::vector<int32_t> rule_start;
  std::vector<int32_t> state_rule;
  std::vector<std::string> rule_names;
  int32_t root_rule = 0;
  // One byte per run of bytes the grammar (and UTF-8) never tell apart, and each run's bytes.
  std::vector<uint8_t> class_reps;
  std::vector<grammar::ByteSet> class_runs;

  // Position masks, filled lazily by matchers and shared by all of them: a mutex guards the
  // map; an entry, once inserted, is immutable and lives as long as the grammar, so matchers
  // keep raw pointers to entries. Two matchers may compute the same entry at once; the first
  // insertion wins. Keyed by vocabulary serial (bits 40 and up), top state (bits 20-39)
  // and the state below it plus one (bits 0-19; 0 when there is none).
  const grammar::PositionMasks* find_masks(uint64_t key) const;
  // Positions with equal masks (the string bodies of many properties, the members of free
  // JSON objects and arrays) share one entry, which keeps a grammar computed ahead small.
  const grammar::PositionMasks* insert_masks(uint64_t key,
                                             std::unique_ptr<grammar::PositionMasks> m) const;
  // Where precompute_masks stopped for vocabulary `serial` (0 before it ran, SIZE_MAX when
  // it finished).
  size_t ahead_next(uint64_t serial) const;
  void set_ahead_next(uint64_t serial, size_t next) const;

 private:
  mutable std::mutex mu_;
  mutable std::unordered_map<uint64_t, const grammar::PositionMasks*> masks_;
  mutable std::unordered_multimap<uint64_t, const grammar::PositionMasks*> by_content_;
  mutable std::vector<std::unique_ptr<grammar::PositionMasks>> owned_;
  mutable std::unordered_map<uint64_t, size_t> ahead_;
};

namespace grammar {
// Merges the states of each rule that accept the same continuations (grammar_minimize.cpp).
void merge_equivalent_states(Grammar* g);
// Compiles the rules of `b` with `root` as the start expression.
Result<std::shared_ptr<const Grammar>> compile(ExprBuilder& b, int32_t root);
}  // namespace grammar

}  // namespace mx
