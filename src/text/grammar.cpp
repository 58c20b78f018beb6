// The grammar IR and its compilation: Thompson construction of one NFA per rule, subset
// construction (or epsilon elimination where that would grow too large), a check that no
// rule can call itself before reading a byte (the matcher's stack would grow without end),
// and the public constructors built on the front ends.
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "text/grammar_internal.h"

namespace mx::grammar {

int32_t ExprBuilder::add(Expr e) {
  if (static_cast<int32_t>(exprs_.size()) >= kMaxExprs) {
    fail(invalid_argument("grammar too large: more than " + std::to_string(kMaxExprs) +
                          " expression nodes"));
    if (exprs_.empty()) exprs_.emplace_back();
    return 0;
  }
  exprs_.push_back(std::move(e));
  return static_cast<int32_t>(exprs_.size()) - 1;
}

int32_t ExprBuilder::bytes(const ByteSet& set) {
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = set;
  return add(std::move(e));
}

int32_t ExprBuilder::range(int lo, int hi) {
  ByteSet s;
  s.add(lo, hi);
  return bytes(s);
}

int32_t ExprBuilder::literal(std::string_view s) {
  std::vector<int32_t> kids;
  kids.reserve(s.size());
  for (unsigned char c : s) kids.push_back(range(c, c));
  return seq(std::move(kids));
}

int32_t ExprBuilder::seq(std::vector<int32_t> kids) {
  if (kids.size() == 1) return kids[0];
  Expr e;
  e.kind = Expr::Kind::kSeq;
  e.kids = std::move(kids);
  return add(std::move(e));
}

int32_t ExprBuilder::alt(std::vector<int32_t> kids) {
  // Alternatives that read one byte each are one byte set: a single NFA state rather than one
  // per alternative, which a class of many ranges inside a bounded repetition multiplies.
  ByteSet merged;
  size_t single = 0;
  for (int32_t k : kids) {
    if (exprs_[k].kind == Expr::Kind::kBytes) {
      merged |= exprs_[k].bytes;
      ++single;
    }
  }
  if (single > 1) {
    std::vector<int32_t> rest{bytes(merged)};
    for (int32_t k : kids) {
      if (exprs_[k].kind != Expr::Kind::kBytes) rest.push_back(k);
    }
    kids = std::move(rest);
  }
  if (kids.size() == 1) return kids[0];
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.kids = std::move(kids);
  return add(std::move(e));
}

int32_t ExprBuilder::repeat(int32_t body, int32_t min, int32_t max) {
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.kids = {body};
  e.min = min;
  e.max = max;
  return add(std::move(e));
}

int32_t ExprBuilder::ref(int32_t rule) {
  Expr e;
  e.kind = Expr::Kind::kRef;
  e.rule = rule;
  return add(std::move(e));
}

int32_t ExprBuilder::object(std::vector<int32_t> members, std::vector<uint8_t> required,
                            int32_t extra, int32_t sep) {
  Expr e;
  e.kind = Expr::Kind::kObject;
  e.kids = std::move(members);
  e.required = std::move(required);
  e.extra = extra;
  e.sep = sep;
  return add(std::move(e));
}

int32_t ExprBuilder::new_rule(std::string name) {
  if (num_rules() >= kMaxRules) {
    fail(invalid_argument("grammar too large: more than " + std::to_string(kMaxRules) + " rules"));
    return -1;
  }
  rule_body_.push_back(-1);
  rule_names_.push_back(std::move(name));
  return num_rules() - 1;
}

namespace {

// One rule's NFA with epsilon edges, as Thompson construction leaves it.
struct RawNfa {
  struct State {
    std::vector<ByteEdge> bytes;
    std::vector<int32_t> eps;
    std::vector<CallEdge> calls;
  };
  std::vector<State> states;
};

class Thompson {
 public:
  Thompson(const ExprBuilder& b, int32_t* budget) : b_(b), budget_(budget) {}

  bool build(int32_t body, RawNfa* out, int32_t* final_state) {
    nfa_ = out;
    const int32_t start = add_state();
    *final_state = emit(body, start);
    return !over_;
  }

 private:
  int32_t add_state() {
    if (--*budget_ < 0) {
      over_ = true;
      return 0;
    }
    nfa_->states.emplace_back();
    return static_cast<int32_t>(nfa_->states.size()) - 1;
  }
  void eps(int32_t from, int32_t to) {
    if (!over_) nfa_->states[from].eps.push_back(to);
  }

  int32_t emit(int32_t id, int32_t from) {
    if (over_) return 0;
    const Expr& e = b_.expr(id);
    switch (e.kind) {
      case Expr::Kind::kBytes:
        return emit_bytes(e.bytes, from);
      case Expr::Kind::kSeq: {
        int32_t cur = from;
        for (int32_t k : e.kids) cur = emit(k, cur);
        return cur;
      }
      case Expr::Kind::kAlt: {
        const int32_t to = add_state();
        for (int32_t k : e.kids) {
          const int32_t s = add_state();
          eps(from, s);
          eps(emit(k, s), to);
        }
        return to;
      }
      case Expr::Kind::kRepeat:
        return emit_repeat(e, from);
      case Expr::Kind::kRef: {
        const int32_t to = add_state();
        if (!over_) nfa_->states[from].calls.push_back({e.rule, to});
        return to;
      }
      case Expr::Kind::kObject:
        return emit_object(e, from);
    }
    return 0;
  }

  int32_t emit_bytes(const ByteSet& set, int32_t from) {
    const int32_t to = add_state();
    if (over_) return 0;
    for (int lo = 0; lo < 256;) {
      if (!set.has(lo)) {
        ++lo;
        continue;
      }
      int hi = lo;
      while (hi + 1 < 256 && set.has(hi + 1)) ++hi;
      nfa_->states[from].bytes.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), to});
      lo = hi + 1;
    }
    return to;
  }

  // Each copy gets fresh states so that a loop never feeds back into what came before.
  int32_t emit_repeat(const Expr& e, int32_t from) {
    int32_t cur = from;
    for (int32_t i = 0; i < e.min && !over_; ++i) cur = emit(e.kids[0], cur);
    if (e.max < 0) {
      const int32_t loop = add_state();
      const int32_t body = add_state();
      eps(cur, loop);
      eps(loop, body);
      eps(emit(e.kids[0], body), loop);
      return loop;
    }
    if (e.max == e.min) return cur;
    const int32_t end = add_state();
    for (int32_t i = e.min; i < e.max && !over_; ++i) {
      eps(cur, end);
      cur = emit(e.kids[0], cur);
    }
    eps(cur, end);
    return end;
  }

  // Members in order, each required one present, joined by `sep`: state first[i] means
  // "nothing emitted yet, at member i", after[i] "something emitted, at member i".
  int32_t emit_object(const Expr& e, int32_t from) {
    const size_t n = e.kids.size();
    std::vector<int32_t> first(n + 1), after(n + 1);
    first[0] = from;
    for (size_t i = 1; i <= n; ++i) first[i] = add_state();
    for (size_t i = 0; i <= n; ++i) after[i] = add_state();
    for (size_t i = 0; i < n && !over_; ++i) {
      eps(emit(e.kids[i], first[i]), after[i + 1]);
      eps(emit(e.kids[i], emit(e.sep, after[i])), after[i + 1]);
      if (!e.required[i]) {
        eps(first[i], first[i + 1]);
        eps(after[i], after[i + 1]);
      }
    }
    const int32_t end = add_state();
    eps(first[n], end);
    eps(after[n], end);
    if (e.extra >= 0) {
      eps(emit(e.extra, first[n]), after[n]);
      eps(emit(e.extra, emit(e.sep, after[n])), after[n]);
    }
    return end;
  }

  const ExprBuilder& b_;
  int32_t* budget_;
  RawNfa* nfa_ = nullptr;
  bool over_ = false;
};

// Epsilon elimination of one rule into `g`: a state of the result stands for a raw state
// reached by a byte or a return (or the start) and carries the edges of its epsilon closure.
// Returns the start state, or -1 past kMaxEdges or kMaxClosureWork (counted across rules).
int32_t eliminate_eps(const RawNfa& raw, int32_t final_state, int32_t rule, Grammar* g,
                      size_t* closure_work) {
  std::vector<int32_t> id(raw.states.size(), -1);
  std::vector<int32_t> work;
  auto get = [&](int32_t raw_state) {
    if (id[raw_state] < 0) {
      id[raw_state] = static_cast<int32_t>(g->states.size());
      g->states.emplace_back();
      g->state_rule.push_back(rule);
      work.push_back(raw_state);
    }
    return id[raw_state];
  };
  const int32_t start = get(0);
  std::vector<uint32_t> seen(raw.states.size(), 0);
  uint32_t stamp = 0;
  std::vector<int32_t> stack, closure;
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    ++stamp;
    closure.clear();
    stack.assign(1, r);
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      if (seen[s] == stamp) continue;
      seen[s] = stamp;
      if (++*closure_work > kMaxClosureWork) return -1;
      closure.push_back(s);
      for (int32_t t : raw.states[s].eps) stack.push_back(t);
    }
    std::sort(closure.begin(), closure.end());
    std::vector<ByteEdge> bytes;
    std::vector<CallEdge> calls;
    bool final = false;
    for (int32_t s : closure) {
      final = final || s == final_state;
      for (const ByteEdge& e : raw.states[s].bytes) bytes.push_back({e.lo, e.hi, get(e.target)});
      for (const CallEdge& c : raw.states[s].calls) calls.push_back({c.rule, get(c.ret)});
    }
    NfaState& st = g->states[id[r]];
    st.final = final;
    st.byte_begin = static_cast<uint32_t>(g->byte_edges.size());
    g->byte_edges.insert(g->byte_edges.end(), bytes.begin(), bytes.end());
    st.byte_end = static_cast<uint32_t>(g->byte_edges.size());
    st.call_begin = static_cast<uint32_t>(g->call_edges.size());
    g->call_edges.insert(g->call_edges.end(), calls.begin(), calls.end());
    st.call_end = static_cast<uint32_t>(g->call_edges.size());
    if (g->byte_edges.size() + g->call_edges.size() > kMaxEdges) return -1;
  }
  return start;
}

// Subset construction of one rule into `g`: a state of the result is the epsilon closure of
// a set of raw states; byte ranges and calls of the same rule lead to the union of their
// targets. Alternatives with a common prefix then share states, so the matcher mostly holds
// one stack, and chains of optional parts stay linear (where epsilon elimination copies
// every later edge into every state). Returns the start state, or -1 when the result would
// pass its state budget (then the caller falls back to eliminate_eps).
class SubsetBuilder {
 public:
  SubsetBuilder(const RawNfa& raw, int32_t final_state, size_t cap, size_t* work)
      : raw_(raw), final_(final_state), cap_(cap), work_(work), seen_(raw.states.size(), 0) {}

  // Builds the whole automaton; false past a budget.
  bool build() {
    if (close({0}) < 0) return false;
    for (size_t d = 0; d < sets_.size(); ++d) {
      const std::vector<int32_t> members = sets_[d];  // a copy: close() grows sets_
      State st;
      st.final = std::binary_search(members.begin(), members.end(), final_);
      if (!byte_edges(members, &st) || !call_edges(members, &st)) return false;
      out_[d] = std::move(st);
    }
    return true;
  }

  // Appends the states to `g`; returns the start state.
  int32_t append(int32_t rule, Grammar* g) const {
    const auto base = static_cast<int32_t>(g->states.size());
    for (const State& d : out_) {
      NfaState st;
      st.final = d.final;
      st.byte_begin = static_cast<uint32_t>(g->byte_edges.size());
      for (const ByteEdge& e : d.bytes) g->byte_edges.push_back({e.lo, e.hi, e.target + base});
      st.byte_end = static_cast<uint32_t>(g->byte_edges.size());
      st.call_begin = static_cast<uint32_t>(g->call_edges.size());
      for (const CallEdge& c : d.calls) g->call_edges.push_back({c.rule, c.ret + base});
      st.call_end = static_cast<uint32_t>(g->call_edges.size());
      g->states.push_back(st);
      g->state_rule.push_back(rule);
    }
    return base;
  }

 private:
  struct State {
    std::vector<ByteEdge> bytes;
    std::vector<CallEdge> calls;
    bool final = false;
  };

  // The state for the closure of `seeds`, or -1 past a budget.
  int32_t close(const std::vector<int32_t>& seeds) {
    ++stamp_;
    set_.clear();
    stack_ = seeds;
    while (!stack_.empty()) {
      const int32_t x = stack_.back();
      stack_.pop_back();
      if (seen_[x] == stamp_) continue;
      seen_[x] = stamp_;
      if (++*work_ > kMaxClosureWork) return -1;
      set_.push_back(x);
      for (int32_t t : raw_.states[x].eps) stack_.push_back(t);
    }
    std::sort(set_.begin(), set_.end());
    std::string key(reinterpret_cast<const char*>(set_.data()), set_.size() * sizeof(int32_t));
    auto [it, inserted] = ids_.try_emplace(std::move(key), static_cast<int32_t>(sets_.size()));
    if (inserted) {
      if (sets_.size() >= cap_) return -1;
      sets_.push_back(set_);
      out_.emplace_back();
    }
    return it->second;
  }

  // Splits the byte ranges of the members at every range boundary; each piece leads to the
  // closure of the targets of the ranges covering it.
  bool byte_edges(const std::vector<int32_t>& members, State* st) {
    edges_.clear();
    cuts_.clear();
    for (int32_t x : members) {
      for (const ByteEdge& e : raw_.states[x].bytes) {
        edges_.push_back(e);
        cuts_.push_back(e.lo);
        cuts_.push_back(e.hi + 1);
      }
    }
    std::sort(cuts_.begin(), cuts_.end());
    cuts_.erase(std::unique(cuts_.begin(), cuts_.end()), cuts_.end());
    targets_.assign(cuts_.size(), {});
    for (const ByteEdge& e : edges_) {
      for (size_t k = std::lower_bound(cuts_.begin(), cuts_.end(), e.lo) - cuts_.begin();
           cuts_[k] <= e.hi; ++k) {
        targets_[k].push_back(e.target);
      }
    }
    for (size_t k = 0; k + 1 < cuts_.size(); ++k) {
      if (targets_[k].empty()) continue;
      const int32_t t = close(targets_[k]);
      if (t < 0) return false;
      const auto lo = static_cast<uint8_t>(cuts_[k]), hi = static_cast<uint8_t>(cuts_[k + 1] - 1);
      if (!st->bytes.empty() && st->bytes.back().target == t && st->bytes.back().hi + 1 == lo) {
        st->bytes.back().hi = hi;
      } else {
        st->bytes.push_back({lo, hi, t});
      }
    }
    return true;
  }

  // Calls of one rule merge: the callee is the same language, its returns a set.
  bool call_edges(const std::vector<int32_t>& members, State* st) {
    std::vector<CallEdge> calls;
    for (int32_t x : members) {
      calls.insert(calls.end(), raw_.states[x].calls.begin(), raw_.states[x].calls.end());
    }
    std::sort(calls.begin(), calls.end(),
              [](const CallEdge& a, const CallEdge& b) { return a.rule < b.rule; });
    for (size_t i = 0; i < calls.size();) {
      std::vector<int32_t> rets;
      size_t j = i;
      for (; j < calls.size() && calls[j].rule == calls[i].rule; ++j) rets.push_back(calls[j].ret);
      const int32_t t = close(rets);
      if (t < 0) return false;
      st->calls.push_back({calls[i].rule, t});
      i = j;
    }
    return true;
  }

  const RawNfa& raw_;
  int32_t final_;
  size_t cap_;
  size_t* work_;  // closure steps, counted across rules
  std::vector<State> out_;
  std::vector<std::vector<int32_t>> sets_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  std::vector<int32_t> stack_, set_;
  std::vector<ByteEdge> edges_;
  std::vector<int> cuts_;
  std::vector<std::vector<int32_t>> targets_;
};

int32_t determinize(const RawNfa& raw, int32_t final_state, int32_t rule, Grammar* g,
                    size_t* work) {
  const size_t cap = std::min<size_t>(4 * raw.states.size() + 1024,
                                      static_cast<size_t>(kMaxStates) - g->states.size());
  SubsetBuilder b(raw, final_state, cap, work);
  return b.build() ? b.append(rule, g) : -1;
}

// States of `rule` reachable from its start without reading a byte (through calls of rules
// that can complete empty); visit(call) sees every call edge met on the way.
template <typename F>
bool scan_empty_prefix(const Grammar& g, int32_t rule, const std::vector<uint8_t>& nullable,
                       F&& visit) {
  std::vector<int32_t> stack{g.rule_start[rule]};
  std::vector<int32_t> seen;
  bool reaches_final = false;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    const NfaState& st = g.states[s];
    reaches_final = reaches_final || st.final;
    for (uint32_t c = st.call_begin; c < st.call_end; ++c) {
      visit(g.call_edges[c]);
      if (nullable[g.call_edges[c].rule]) stack.push_back(g.call_edges[c].ret);
    }
  }
  return reaches_final;
}

Status check_left_recursion(const Grammar& g) {
  const size_t n = g.rule_start.size();
  std::vector<uint8_t> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      if (scan_empty_prefix(g, static_cast<int32_t>(r), nullable, [](const CallEdge&) {})) {
        nullable[r] = 1;
        changed = true;
      }
    }
  }
  std::vector<std::vector<int32_t>> left(n);
  for (size_t r = 0; r < n; ++r) {
    scan_empty_prefix(g, static_cast<int32_t>(r), nullable,
                      [&](const CallEdge& c) { left[r].push_back(c.rule); });
  }
  // Iterative depth-first search for a cycle: 0 new, 1 on the path, 2 done.
  std::vector<uint8_t> color(n, 0);
  for (size_t root = 0; root < n; ++root) {
    if (color[root]) continue;
    std::vector<std::pair<int32_t, size_t>> path{{static_cast<int32_t>(root), 0}};
    color[root] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const int32_t q = left[r][next++];
      if (color[q] == 1) {
        return invalid_argument("'" + g.rule_names[q] +
                                "' refers to itself before any text (left recursion)");
      }
      if (color[q] == 0) {
        color[q] = 1;
        path.emplace_back(q, 0);
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<const Grammar>> compile(ExprBuilder& b, int32_t root) {
  MX_RETURN_IF_ERROR(b.status());
  const int32_t root_rule = b.new_rule("root");
  MX_RETURN_IF_ERROR(b.status());
  b.set_body(root_rule, root);
  auto g = std::make_shared<Grammar>();
  g->root_rule = root_rule;
  int32_t budget = kMaxStates;
  size_t work = 0, dfa_work = 0;
  for (int32_t r = 0; r < b.num_rules(); ++r) {
    if (b.body(r) < 0) return invalid_argument("rule '" + b.rule_name(r) + "' has no body");
    RawNfa raw;
    int32_t final_state = 0;
    if (!Thompson(b, &budget).build(b.body(r), &raw, &final_state)) {
      return invalid_argument("grammar too large: more than " + std::to_string(kMaxStates) +
                              " states");
    }
    g->rule_names.push_back(b.rule_name(r));
    int32_t start = determinize(raw, final_state, r, g.get(), &dfa_work);
    if (start < 0) start = eliminate_eps(raw, final_state, r, g.get(), &work);
    if (start < 0) {
      return invalid_argument("grammar too large: more than " + std::to_string(kMaxEdges) +
                              " edges or " + std::to_string(kMaxClosureWork) +
                              " steps of epsilon closure (long chains of optional parts)");
    }
    g->rule_start.push_back(start);
  }
  MX_RETURN_IF_ERROR(check_left_recursion(*g));
  merge_equivalent_states(g.get());
  // Bytes that no edge of the grammar and no step of the UTF-8 decoder over string text tell
  // apart behave alike everywhere: a walk steps one representative per run between cuts.
  std::array<bool, 257> cut{};
  for (const ByteEdge& e : g->byte_edges) {
    cut[e.lo] = true;
    cut[e.hi + 1] = true;
  }
  for (int c : {0x00, 0x20, 0x22, 0x23, 0x5C, 0x5D, 0x7F, 0x80, 0x90, 0xA0,
                0xC0, 0xC2, 0xE0, 0xE1, 0xED, 0xEE, 0xF0, 0xF1, 0xF4, 0xF5}) {
    cut[c] = true;
  }
  for (int c = 0; c < 256; ++c) {
    if (!cut[c]) continue;
    int end = c + 1;
    while (end < 256 && !cut[end]) ++end;
    g->class_reps.push_back(static_cast<uint8_t>(c));
    g->class_runs.emplace_back();
    g->class_runs.back().add(c, end - 1);
  }
  return std::shared_ptr<const Grammar>(std::move(g));
}

}  // namespace mx::grammar

namespace mx {

const grammar::PositionMasks* Grammar::find_masks(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = masks_.find(key);
  return it == masks_.end() ? nullptr : it->second;
}

namespace {

uint64_t content_hash(const grammar::PositionMasks& m) {
  uint64_t h = 0xCBF29CE484222325ull;
  // Every eighth word of a bitset is enough to tell masks apart in practice; equal hashes are
  // compared whole.
  auto mix = [&h](const auto& x, uint64_t tag) {
    h = (h ^ tag ^ x.size()) * 0x100000001B3ull;
    const size_t stride = x.size() > 256 ? 8 : 1;
    for (size_t i = 0; i < x.size(); i += stride) {
      h = (h ^ static_cast<uint32_t>(x[i])) * 0x100000001B3ull;
    }
  };
  mix(m.bits, 1);
  mix(m.list, 2);
  mix(m.uncertain, 3);
  return h;
}

}  // namespace

const grammar::PositionMasks* Grammar::insert_masks(
    uint64_t key, std::unique_ptr<grammar::PositionMasks> m) const {
  const uint64_t h = content_hash(*m);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = masks_.find(key); it != masks_.end()) return it->second;
  const grammar::PositionMasks* entry = nullptr;
  for (auto [it, end] = by_content_.equal_range(h); it != end && !entry; ++it) {
    const grammar::PositionMasks& o = *it->second;
    if (o.bits == m->bits && o.list == m->list && o.uncertain == m->uncertain) entry = it->second;
  }
  if (!entry) {
    entry = m.get();
    owned_.push_back(std::move(m));
    by_content_.emplace(h, entry);
  }
  masks_.emplace(key, entry);
  return entry;
}

size_t Grammar::ahead_next(uint64_t serial) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ahead_.find(serial);
  return it == ahead_.end() ? 0 : it->second;
}

void Grammar::set_ahead_next(uint64_t serial, size_t next) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t& at = ahead_[serial];
  at = std::max(at, next);
}

Result<std::shared_ptr<const Grammar>> grammar_from_json_schema(
    const nlohmann::ordered_json& schema) {
  grammar::ExprBuilder b;
  MX_ASSIGN_OR_RETURN(const int32_t root, grammar::json_schema_expr(b, schema));
  return grammar::compile(b, root);
}

Result<std::shared_ptr<const Grammar>> grammar_any_json_object() {
  grammar::ExprBuilder b;
  const int32_t root = grammar::any_json_object_expr(b);
  return grammar::compile(b, root);
}

Result<std::shared_ptr<const Grammar>> grammar_from_regex(std::string_view regex) {
  grammar::ExprBuilder b;
  MX_ASSIGN_OR_RETURN(const int32_t root, grammar::regex_expr(b, regex, false));
  auto g = grammar::compile(b, root);
  if (!g.is_ok()) return g.status().with_context("regex");
  return g;
}

Result<std::shared_ptr<const Grammar>> grammar_from_choices(
    const std::vector<std::string>& choices) {
  if (choices.empty()) return invalid_argument("choice: the list of choices is empty");
  grammar::ExprBuilder b;
  std::vector<int32_t> alts;
  for (const std::string& c : choices) alts.push_back(b.literal(c));
  return grammar::compile(b, b.alt(std::move(alts)));
}

Result<std::shared_ptr<const Grammar>> grammar_from_sequences(
    const std::vector<GrammarSequence>& alternatives, int min_repeat, int max_repeat,
    const std::string& separator) {
  if (alternatives.empty()) return invalid_argument("sequences: no alternatives");
  if (min_repeat < 0 || (max_repeat >= 0 && max_repeat < min_repeat)) {
    return invalid_argument("sequences: bad repeat range " + std::to_string(min_repeat) + ".." +
                            std::to_string(max_repeat));
  }
  if (min_repeat > grammar::kMaxRepeat || max_repeat > grammar::kMaxRepeat) {
    return invalid_argument("sequences: repeat count over " + std::to_string(grammar::kMaxRepeat));
  }
  grammar::ExprBuilder b;
  std::vector<int32_t> alts;
  for (size_t a = 0; a < alternatives.size(); ++a) {
    std::vector<int32_t> parts;
    for (size_t p = 0; p < alternatives[a].size(); ++p) {
      const GrammarPiece& piece = alternatives[a][p];
      const std::string where = "sequence " + std::to_string(a) + " piece " + std::to_string(p);
      Result<int32_t> e = 0;
      switch (piece.kind) {
        case GrammarPiece::Kind::kLiteral:
          e = b.literal(piece.text);
          break;
        case GrammarPiece::Kind::kJsonSchema:
          e = grammar::json_schema_expr(b, piece.schema);
          break;
        case GrammarPiece::Kind::kRegex:
          e = grammar::regex_expr(b, piece.text, false);
          break;
      }
      if (!e.is_ok()) return e.status().with_context(where);
      parts.push_back(*e);
    }
    alts.push_back(b.seq(std::move(parts)));
  }
  const int32_t item = b.alt(std::move(alts));
  const int32_t more = b.seq({b.literal(separator), item});
  const int32_t rest =
      b.repeat(more, std::max(min_repeat - 1, 0), max_repeat < 0 ? -1 : max_repeat - 1);
  int32_t root = b.seq({item, rest});
  if (max_repeat == 0) {
    root = b.empty();
  } else if (min_repeat == 0) {
    root = b.opt(root);
  }
  return grammar::compile(b, root);
}

}  // namespace mx
