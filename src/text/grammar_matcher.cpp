// The matcher.
//
// The matcher's state is a set of parser stacks, each a node (NFA state on top, parent node
// below) interned so that equal stacks share one id. A byte moves every stack whose top
// state has an edge for it, then closes over calls (push), completions (pop) and the end of
// the grammar.
//
// Masks follow XGrammar's split: from a position (the top two frames of a stack: the top
// state and the state its rule returns to) the tokens whose fate is decided before leaving
// those frames do not depend on the rest of the stack. A walk of the vocabulary trie from
// that position alone sorts every token into accepted, rejected (a prefix that fails prunes
// its subtree) or uncertain (the walk left both frames before the token ended). The result
// is computed once per position and vocabulary and cached in the grammar; at run time the
// mask is the union of the accepted sets of the current positions, plus the uncertain tokens
// that pass a full check against the real stacks. Since the front ends keep everything but
// recursion inside one rule, uncertain tokens are the few that close two nested values and
// go on.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "core/check.h"
#include "text/grammar_internal.h"
#include "text/grammar_vocab.h"

namespace mx {

using grammar::PositionMasks;
using namespace grammar;

namespace {

constexpr int32_t kNoParent = -1;  // below the bottom frame: the grammar's (or a walk's) end
// A walk automaton kept between positions is dropped past this many states.
constexpr size_t kMaxKeptWalkStates = 1 << 16;
// A walk state's run chain steps every byte class from it, which a small subtree does not
// repay: smaller ones are walked.
constexpr int32_t kMinRunSkipTokens = 16;

// Parser stacks as interned (state, parent) nodes. Nodes made while trying a token are
// dropped again by truncate(), so that checks do not grow the pool.
class NodePool {
 public:
  int32_t intern(int32_t state, int32_t parent) {
    const uint64_t key =
        (uint64_t{static_cast<uint32_t>(state)} << 32) | static_cast<uint32_t>(parent);
    auto [it, inserted] = index_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
    if (inserted) nodes_.push_back({state, parent});
    return it->second;
  }
  int32_t state(int32_t n) const { return nodes_[n].state; }
  int32_t parent(int32_t n) const { return nodes_[n].parent; }
  size_t size() const { return nodes_.size(); }
  void truncate(size_t n) {
    for (size_t i = n; i < nodes_.size(); ++i) {
      index_.erase((uint64_t{static_cast<uint32_t>(nodes_[i].state)} << 32) |
                   static_cast<uint32_t>(nodes_[i].parent));
    }
    nodes_.resize(std::min(n, nodes_.size()));
  }

 private:
  struct Node {
    int32_t state, parent;
  };
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> index_;
};

// The stacks whose top can read a byte, and whether the bottom frame completed (the grammar
// may end; in a position walk, the walk left its rule).
struct ParseState {
  std::vector<int32_t> frontier;
  bool end = false;
};

class Stepper {
 public:
  Stepper(const Grammar& g, NodePool& pool) : g_(g), pool_(pool) {}

  void start(int32_t node, ParseState& out) {
    begin(out);
    closure(node, out);
  }

  void step(const ParseState& in, uint8_t byte, ParseState& out) {
    begin(out);
    for (int32_t n : in.frontier) {
      const int32_t parent = pool_.parent(n);
      const grammar::NfaState& st = g_.states[pool_.state(n)];
      for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
        const grammar::ByteEdge& edge = g_.byte_edges[e];
        if (byte >= edge.lo && byte <= edge.hi) closure(pool_.intern(edge.target, parent), out);
      }
    }
  }

 private:
  void begin(ParseState& out) {
    out.frontier.clear();
    out.end = false;
    ++gen_;
    visits_ = 0;
  }

  void closure(int32_t node, ParseState& out) {
    stack_.assign(1, node);
    while (!stack_.empty()) {
      const int32_t n = stack_.back();
      stack_.pop_back();
      if (static_cast<size_t>(n) >= seen_.size()) seen_.resize(pool_.size() * 2 + 64, 0);
      if (seen_[n] == gen_) continue;
      seen_[n] = gen_;
      if (++visits_ > grammar::kMaxStacks * 8 || out.frontier.size() >= grammar::kMaxStacks) {
        return;  // see kMaxStacks
      }
      const int32_t parent = pool_.parent(n);
      const grammar::NfaState& st = g_.states[pool_.state(n)];
      if (st.byte_begin != st.byte_end) out.frontier.push_back(n);
      for (uint32_t c = st.call_begin; c < st.call_end; ++c) {
        const grammar::CallEdge& call = g_.call_edges[c];
        const int32_t ret = pool_.intern(call.ret, parent);
        stack_.push_back(pool_.intern(g_.rule_start[call.rule], ret));
      }
      if (st.final) {
        if (parent == kNoParent) {
          out.end = true;
        } else {
          stack_.push_back(parent);
        }
      }
    }
  }

  const Grammar& g_;
  NodePool& pool_;
  std::vector<uint32_t> seen_;
  uint32_t gen_ = 0;
  size_t visits_ = 0;  // nodes closed over in this step
  std::vector<int32_t> stack_;
};

// The parse states one walk meets, interned, with transitions filled on first use. A walk
// meets the same few states at most trie nodes (inside a string every letter leads back to
// where it started), so most of its steps are a table lookup.
class WalkAutomaton {
 public:
  WalkAutomaton(const Grammar& g, int32_t parent_state)
      : stepper_(g, pool_), reps_(g.class_reps), run_sets_(g.class_runs) {
    below_ = parent_state < 0 ? kNoParent : pool_.intern(parent_state, kNoParent);
  }

  // The walk state of a position whose top state is `state` (the frame below is this
  // automaton's).
  int32_t start(int32_t state) {
    tmp_.frontier.assign(1, pool_.intern(state, below_));
    tmp_.end = false;
    return intern(tmp_);
  }
  size_t states() const { return states_.size(); }

  int32_t next(int32_t s, uint8_t byte) {
    if (s < kDenseStates) {
      const size_t at = static_cast<size_t>(s) * 256 + byte;
      if (dense_[at] < 0) {
        const int32_t t = compute(s, byte);  // may grow dense_
        dense_[at] = t;
      }
      return dense_[at];
    }
    const uint64_t key = (static_cast<uint64_t>(s) << 8) | byte;
    auto it = sparse_.find(key);
    if (it != sparse_.end()) return it->second;
    const int32_t t = compute(s, byte);
    sparse_.emplace(key, t);
    return t;
  }
  bool alive(int32_t s) const { return flags_[s] & kAlive; }
  bool end(int32_t s) const { return flags_[s] & kEnd; }

  // Every state that plain UTF-8 text leads to from walk state `s`, the decoder being in
  // `q`, within `depth` bytes is alive. Such bytes mostly share their targets (inside a string,
  // one per decoder state), so the recursion runs over the distinct (target, decoder state)
  // pairs; each (state, q, depth) is decided once.
  bool text_safe(int32_t s, uint8_t q, int32_t depth) {
    if (!alive(s)) return false;
    if (depth == 0) return true;
    // Safe to a depth is safe to every smaller one, unsafe to every larger one.
    Known& k = known(s, q);
    if (depth <= k.safe) return true;
    if (depth >= k.unsafe) return false;
    bool ok = true;
    for (const auto& [t, tq] : text_targets(s, q)) {
      if (!text_safe(t, tq, depth - 1)) {
        ok = false;
        break;
      }
    }
    Known& after = known(s, q);  // the table may have grown
    if (ok) {
      after.safe = std::max(after.safe, depth);
    } else {
      after.unsafe = std::min(after.unsafe, depth);
    }
    return ok;
  }

  // The length at which every string of plain ASCII from `s` has died (neither alive nor
  // ending), when all such strings pass through the same states and none of them ends; -1
  // otherwise. A string body's character count is the usual case.
  int32_t ascii_death(int32_t s) {
    int32_t at = s;
    for (int32_t depth = 1; depth <= kMaxTextHeight + 1; ++depth) {
      int32_t t = -1;
      for (size_t r = 0; r < reps_.size(); ++r) {
        const uint8_t b = reps_[r];
        if (!is_plain(b)) continue;
        const int32_t u = next(at, b);
        if (t >= 0 && u != t) return -1;
        t = u;
      }
      if (t < 0 || end(t)) return -1;
      if (!alive(t)) return depth;
      at = t;
    }
    return -1;
  }

  // Every string of bytes from `set`, up to `depth` long, keeps the walk alive from `s`. Checked
  // through the state's run chain: the bytes that all lead to one successor, that successor's,
  // and so on; strings of those bytes follow the chain whatever they are, so the test is one
  // set inclusion against the chain's running intersection at that depth.
  bool run_safe(int32_t s, const grammar::ByteSet& set, int32_t depth) {
    if (static_cast<size_t>(s) >= chains_.size()) chains_.resize(states_.size());
    if (chains_[s].empty()) build_chain(s);
    const std::vector<std::pair<int32_t, grammar::ByteSet>>& c = chains_[s];
    // c holds (deepest depth, intersection) in increasing depth; the last entry covers all
    // deeper ones when its depth is INT32_MAX.
    for (const auto& [until, inter] : c) {
      if (depth > until) continue;
      return ((set.w[0] & ~inter.w[0]) | (set.w[1] & ~inter.w[1]) | (set.w[2] & ~inter.w[2]) |
              (set.w[3] & ~inter.w[3])) == 0;
    }
    return false;
  }

 private:
  static constexpr int32_t kDenseStates = 4096;
  static constexpr int32_t kMaxChain = 64;  // deeper subtrees are walked

  // The bytes of `s` that lead to its most common alive successor, and that successor (-1:
  // none); computed once per state, as the chains of successive states share their tails.
  const std::pair<grammar::ByteSet, int32_t>& main_run(int32_t s) {
    if (static_cast<size_t>(s) >= main_runs_.size()) main_runs_.resize(states_.size());
    if (!main_runs_[s]) main_runs_[s] = compute_main_run(s);
    return *main_runs_[s];
  }

  std::pair<grammar::ByteSet, int32_t> compute_main_run(int32_t s) {
    std::vector<std::pair<int32_t, grammar::ByteSet>> by_target;
    for (size_t r = 0; r < reps_.size(); ++r) {
      const int32_t t = next(s, reps_[r]);
      if (!alive(t)) continue;
      auto it = std::find_if(by_target.begin(), by_target.end(),
                             [&](const auto& e) { return e.first == t; });
      if (it == by_target.end()) {
        by_target.emplace_back(t, run_sets_[r]);
      } else {
        it->second |= run_sets_[r];
      }
    }
    std::pair<grammar::ByteSet, int32_t> best{grammar::ByteSet{}, -1};
    int best_count = 0;
    for (const auto& [t, set] : by_target) {
      int count = 0;
      for (uint64_t w : set.w) count += __builtin_popcountll(w);
      if (count > best_count) {
        best_count = count;
        best = {set, t};
      }
    }
    return best;
  }

  // A state's chain from its successor's: the first byte from the main run, the rest as the
  // successor allows. The path of successors is followed until a state whose chain is known,
  // a loop, a cycle, runs with nothing in common, or kMaxChain states, and the chains are
  // derived backwards. A path cut at kMaxChain counts its tail as unsafe, which only walks
  // more; its chains are then kept for `s` alone, as the others would be cut shorter.
  void build_chain(int32_t s) {
    using Chain = std::vector<std::pair<int32_t, grammar::ByteSet>>;
    std::vector<int32_t> path{s};
    grammar::ByteSet shared;  // what the runs so far share: once empty, deeper is no use
    shared.w.fill(~uint64_t{0});
    bool cut = true;
    while (static_cast<int32_t>(path.size()) < kMaxChain) {
      const auto& [run, t] = main_run(path.back());
      for (int w = 0; w < 4; ++w) shared.w[w] &= run.w[w];
      chains_.resize(states_.size());
      if (t < 0 || shared.empty() || t == path.back() || !chains_[t].empty() ||
          std::find(path.begin(), path.end(), t) != path.end()) {
        cut = false;
        break;
      }
      path.push_back(t);
    }
    Chain tail;  // the chain of path[k + 1] while path[k] is derived
    for (size_t k = path.size(); k-- > 0;) {
      const int32_t at = path[k];
      const auto& [run, t] = main_run(at);  // the last one's may add states
      chains_.resize(states_.size());
      if (k + 1 == path.size()) tail = t >= 0 && !cut ? chains_[t] : Chain{};
      Chain c;
      if (t >= 0 && !run.empty()) {
        if (t == at) {
          c.emplace_back(INT32_MAX, run);  // a loop: the run holds at every depth
        } else {
          c.emplace_back(1, run);
          for (const auto& [until, inter] : tail) {
            if (until < 1) continue;
            grammar::ByteSet both;
            for (int w = 0; w < 4; ++w) both.w[w] = run.w[w] & inter.w[w];
            if (both.empty()) break;
            const int32_t deeper = until == INT32_MAX ? INT32_MAX : until + 1;
            if (both.w == c.back().second.w) {
              c.back().first = deeper;
            } else {
              c.emplace_back(deeper, both);
            }
          }
        }
      }
      if (c.empty()) c.emplace_back(0, grammar::ByteSet{});  // computed: nothing is safe
      if (!cut || k == 0) chains_[at] = c;
      tail = std::move(c);
    }
  }

  const std::vector<std::pair<int32_t, uint8_t>>& text_targets(int32_t s, uint8_t q) {
    const uint64_t key = (static_cast<uint64_t>(s) << 8) | q;
    auto it = text_targets_.find(key);
    if (it != text_targets_.end()) return it->second;
    std::vector<std::pair<int32_t, uint8_t>> ts;
    for (const uint8_t b : reps_) {
      const uint8_t tq = utf8_next(q, b);
      if (tq == kInvalid) continue;
      const std::pair<int32_t, uint8_t> t{next(s, b), tq};
      if (std::find(ts.begin(), ts.end(), t) == ts.end()) ts.push_back(t);
    }
    return text_targets_.emplace(key, std::move(ts)).first->second;
  }

  int32_t compute(int32_t s, uint8_t byte) {
    stepper_.step(states_[s], byte, tmp_);
    std::sort(tmp_.frontier.begin(), tmp_.frontier.end());
    return intern(tmp_);
  }

  int32_t intern(const ParseState& p) {
    std::string key(reinterpret_cast<const char*>(p.frontier.data()),
                    p.frontier.size() * sizeof(int32_t));
    key += p.end ? '1' : '0';
    auto [it, inserted] = ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
    if (inserted) {
      states_.push_back(p);
      flags_.push_back(
          static_cast<uint8_t>((p.frontier.empty() ? 0 : kAlive) | (p.end ? kEnd : 0)));
      if (states_.size() <= kDenseStates) {
        dense_.resize(states_.size() * 256, -1);
        known_dense_.resize(states_.size() * kUtf8States);
      }
    }
    return it->second;
  }

  NodePool pool_;
  Stepper stepper_;
  ParseState tmp_;
  std::vector<ParseState> states_;
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<int32_t> dense_;
  std::unordered_map<uint64_t, int32_t> sparse_;
  struct Known {
    int32_t safe = 0, unsafe = INT32_MAX;
  };
  // What text_safe learnt per (walk state, decoder state): a table for the first states (the
  // walk asks at nearly every trie node), a map past them.
  Known& known(int32_t s, uint8_t q) {
    if (s < kDenseStates) return known_dense_[static_cast<size_t>(s) * kUtf8States + q];
    return known_[(static_cast<uint64_t>(s) << 8) | q];
  }
  static constexpr uint8_t kAlive = 1, kEnd = 2;
  std::vector<uint8_t> flags_;  // per walk state
  std::vector<Known> known_dense_;
  std::unordered_map<uint64_t, Known> known_;
  std::vector<std::vector<std::pair<int32_t, grammar::ByteSet>>> chains_;  // see run_safe
  std::vector<std::optional<std::pair<grammar::ByteSet, int32_t>>> main_runs_;
  std::unordered_map<uint64_t, std::vector<std::pair<int32_t, uint8_t>>> text_targets_;
  const std::vector<uint8_t>& reps_;  // the grammar's byte classes (Grammar::class_reps)
  const std::vector<grammar::ByteSet>& run_sets_;
  int32_t below_ = kNoParent;  // one byte of each class the grammar and UTF-8 treat alike
};

// The trie walk from `state` with the frame `parent_state` (-1: none) below it (see the top
// of the file).
std::unique_ptr<PositionMasks> compute_masks(const Grammar& g, const TokenVocab::Impl& v,
                                             WalkAutomaton& walk, int32_t state,
                                             int32_t parent_state) {
  const int32_t start = walk.start(state);
  // Below a frame of the root rule nothing lies, so leaving it early is a rejection.
  const bool root = g.state_rule[parent_state < 0 ? state : parent_state] == g.root_rule;
  std::vector<int32_t> level(v.max_depth + 1, start);
  std::vector<uint8_t> left(v.max_depth + 1, 0);  // left the rule before this depth
  std::vector<int32_t> accepted;
  auto masks = std::make_unique<PositionMasks>();
  // A string body at a character boundary takes plain text as far as it survives any text
  // (to its maxLength, say): those tokens come from the vocabulary's bitset, and only the
  // subtrees that hold something else, or reach further, are walked.
  int32_t text_depth = 0;
  for (int32_t lo = 1, hi = kMaxTextHeight; lo <= hi;) {
    const int32_t mid = (lo + hi) / 2;
    if (walk.text_safe(start, kBoundary, mid)) {
      text_depth = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  const bool all_text = text_depth > 0;
  // Plain ASCII past text_depth dies: a subtree of plain ASCII holds nothing the bitset lacks.
  const bool ascii_bounded = all_text && walk.ascii_death(start) == text_depth + 1;
  const int32_t n = static_cast<int32_t>(v.node_byte.size());
  for (int32_t i = 0; i < n;) {
    const int32_t d = v.node_depth[i];
    if (all_text && v.utf8_state[i] != kInvalid && v.text_height[i] >= 0 &&
        (d + v.text_height[i] <= text_depth || (ascii_bounded && v.ascii_subtree[i]))) {
      i = v.node_end[i];
      continue;
    }
    const int32_t cur = level[d] = walk.next(level[d - 1], v.node_byte[i]);
    left[d] = !root && (left[d - 1] || (d > 1 && walk.end(level[d - 1])));
    const bool alive = walk.alive(cur);
    if (alive || walk.end(cur)) {
      accepted.insert(accepted.end(), v.toks.begin() + v.tok_begin[i],
                      v.toks.begin() + v.tok_begin[i + 1]);
    } else if (left[d]) {
      masks->uncertain.insert(masks->uncertain.end(), v.toks.begin() + v.tok_begin[i],
                              v.toks.begin() + v.tok_begin[i + 1]);
    }
    if (alive && v.height[i] > 0 &&
        ((v.text_height[i] > 0 && walk.text_safe(cur, v.utf8_state[i], v.text_height[i])) ||
         (v.tok_begin[v.node_end[i]] - v.tok_begin[i + 1] >= kMinRunSkipTokens &&
          walk.run_safe(cur, v.sets[v.below_set[i]], v.height[i])))) {
      // The whole subtree stays alive: accept it without walking it.
      accepted.insert(accepted.end(), v.toks.begin() + v.tok_begin[i + 1],
                      v.toks.begin() + v.tok_begin[v.node_end[i]]);
      i = v.node_end[i];
      continue;
    }
    if (!alive) {
      if (!root && (left[d] || walk.end(cur))) {
        masks->uncertain.insert(masks->uncertain.end(), v.toks.begin() + v.tok_begin[i + 1],
                                v.toks.begin() + v.tok_begin[v.node_end[i]]);
      }
      i = v.node_end[i];
      continue;
    }
    ++i;
  }
  // A bitset when the list would be longer than the bitset's words.
  const size_t words = (static_cast<size_t>(v.size) + 31) / 32;
  if (all_text || accepted.size() > words) {
    if (all_text) {
      masks->bits = v.text_bits[text_depth];
    } else {
      masks->bits.assign(words, 0);
    }
    for (int32_t t : accepted) masks->bits[t >> 5] |= 1u << (t & 31);
  } else {
    masks->list = std::move(accepted);
  }
  return masks;
}

// One walk automaton per frame below, kept across positions: the positions of one value (a
// bounded string's counter, say) meet the same walk states again.
using Walks = std::unordered_map<int32_t, std::unique_ptr<WalkAutomaton>>;

// A position's place in the grammar's mask cache: vocabulary serial (bits 40 and up), top
// state (bits 20-39), the state below it plus one (bits 0-19).
uint64_t mask_key(uint64_t serial, int32_t state, int32_t parent_state) {
  return (serial << 40) | (static_cast<uint64_t>(state) << 20) |
         static_cast<uint64_t>(parent_state + 1);
}

// The position's masks computed by a walk and stored in the grammar (or the entry another
// thread stored first).
const PositionMasks* compute_and_store(const Grammar& g, const TokenVocab::Impl& v, Walks& walks,
                                       int32_t state, int32_t parent_state) {
  std::unique_ptr<WalkAutomaton>& walk = walks[parent_state];
  if (!walk || walk->states() > kMaxKeptWalkStates) {
    walk = std::make_unique<WalkAutomaton>(g, parent_state);
  }
  return g.insert_masks(mask_key(v.serial, state, parent_state),
                        compute_masks(g, v, *walk, state, parent_state));
}

}  // namespace

struct GrammarMatcher::Impl {
  Impl(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> token_vocab)
      : g(std::move(grammar)), vocab(std::move(token_vocab)), v(vocab->impl()), stepper(*g, pool) {
    stepper.start(pool.intern(g->rule_start[g->root_rule], kNoParent), cur);
  }

  // The state after `bytes` from `from` (not `a` or `b`), or null when they leave the grammar.
  const ParseState* consume(std::string_view bytes, const ParseState* from = nullptr) {
    const ParseState* in = from != nullptr ? from : &cur;
    for (size_t i = 0; i < bytes.size(); ++i) {
      ParseState* out = in == &a ? &b : &a;
      stepper.step(*in, static_cast<uint8_t>(bytes[i]), *out);
      if (out->frontier.empty() && (i + 1 < bytes.size() || !out->end)) return nullptr;
      in = out;
    }
    return bytes.empty() ? nullptr : in;
  }

  // Keyed by the top two frames: the top state and the state the top rule returns to, so
  // that closing a nested value and going on in the enclosing one stays context-independent.
  const PositionMasks& masks_of(int32_t node) {
    const int32_t parent = pool.parent(node);
    const int32_t parent_state = parent < 0 ? -1 : pool.state(parent);
    const uint64_t pos =
        (static_cast<uint64_t>(pool.state(node)) << 20) | static_cast<uint64_t>(parent_state + 1);
    auto it = masks.find(pos);
    if (it != masks.end()) return *it->second;
    const PositionMasks* m = g->find_masks(mask_key(v.serial, pool.state(node), parent_state));
    if (m == nullptr) m = compute_and_store(*g, v, walks, pool.state(node), parent_state);
    masks.emplace(pos, m);
    return *m;
  }

  void fill_mask(uint32_t* mask) {
    const size_t words = (static_cast<size_t>(v.size) + 31) / 32;
    std::memset(mask, 0, words * sizeof(uint32_t));
    if (done) return;
    tops.clear();
    for (int32_t n : cur.frontier) {
      const PositionMasks* m = &masks_of(n);
      if (std::find(tops.begin(), tops.end(), m) == tops.end()) tops.push_back(m);
    }
    for (const PositionMasks* m : tops) {
      if (!m->bits.empty()) {
        for (size_t w = 0; w < words; ++w) mask[w] |= m->bits[w];
      }
      for (int32_t t : m->list) mask[t >> 5] |= 1u << (t & 31);
    }
    for (const PositionMasks* m : tops) {
      for (int32_t t : m->uncertain) {
        if ((mask[t >> 5] >> (t & 31)) & 1) continue;
        const size_t mark = pool.size();
        if (consume(v.bytes[t]) != nullptr) mask[t >> 5] |= 1u << (t & 31);
        pool.truncate(mark);
      }
    }
    if (cur.end) {
      for (int32_t t : v.stops) mask[t >> 5] |= 1u << (t & 31);
    }
  }

  bool accept(int32_t token) {
    if (done || token < 0 || token >= v.size) return false;
    if (v.kind[token] == TokenVocab::Impl::kStop) {
      done = cur.end;
      return done;
    }
    if (v.kind[token] != TokenVocab::Impl::kText) return false;
    const size_t mark = pool.size();
    const ParseState* next = consume(v.bytes[token]);
    if (next == nullptr) {
      pool.truncate(mark);
      return false;
    }
    cur.frontier = next->frontier;
    cur.end = next->end;
    return true;
  }

  size_t allowed_prefix(const std::vector<int32_t>& tokens) {
    if (done) return 0;
    const size_t mark = pool.size();
    ParseState at = cur;
    size_t k = 0;
    for (; k < tokens.size(); ++k) {
      const int32_t t = tokens[k];
      if (t < 0 || t >= v.size || v.kind[t] == TokenVocab::Impl::kNever) break;
      if (v.kind[t] == TokenVocab::Impl::kStop) {
        k += at.end ? 1 : 0;
        break;
      }
      const ParseState* next = consume(v.bytes[t], &at);
      if (next == nullptr) break;
      at = *next;
    }
    pool.truncate(mark);
    return k;
  }

  std::shared_ptr<const Grammar> g;
  std::shared_ptr<const TokenVocab> vocab;
  const TokenVocab::Impl& v;
  NodePool pool;
  Stepper stepper;
  ParseState cur, a, b;
  bool done = false;  // a stop token was accepted: nothing more comes
  // Positions met so far (see masks_of), from the grammar's cache.
  std::unordered_map<uint64_t, const PositionMasks*> masks;
  Walks walks;
  std::vector<const PositionMasks*> tops;
};

namespace {

// Every position of `g` (top state with byte edges, state its rule returns to), the rules
// nearest the root by calls first: those are where a document starts and spends most of its
// tokens, so a budget that runs out leaves the deep nesting levels to be computed lazily.
std::vector<std::pair<int32_t, int32_t>> positions_by_depth(const Grammar& g) {
  const int32_t num_rules = static_cast<int32_t>(g.rule_start.size());
  std::vector<std::vector<int32_t>> parents(num_rules), states(num_rules), callees(num_rules);
  parents[g.root_rule].push_back(-1);
  for (int32_t s = 0; s < static_cast<int32_t>(g.states.size()); ++s) {
    const grammar::NfaState& st = g.states[s];
    if (st.byte_begin != st.byte_end) states[g.state_rule[s]].push_back(s);
    for (uint32_t c = st.call_begin; c < st.call_end; ++c) {
      const grammar::CallEdge& call = g.call_edges[c];
      auto& p = parents[call.rule];
      if (std::find(p.begin(), p.end(), call.ret) == p.end()) p.push_back(call.ret);
      callees[g.state_rule[s]].push_back(call.rule);
    }
  }
  std::vector<int32_t> order{g.root_rule};
  std::vector<uint8_t> seen(num_rules, 0);
  seen[g.root_rule] = 1;
  for (size_t k = 0; k < order.size(); ++k) {
    for (int32_t r : callees[order[k]]) {
      if (!seen[r]) {
        seen[r] = 1;
        order.push_back(r);
      }
    }
  }
  std::vector<std::pair<int32_t, int32_t>> out;
  for (int32_t r : order) {
    for (int32_t p : parents[r]) {
      for (int32_t s : states[r]) out.emplace_back(s, p);
    }
  }
  return out;
}

}  // namespace

bool precompute_masks(const Grammar& g, const TokenVocab& vocab, std::chrono::microseconds budget) {
  const TokenVocab::Impl& v = vocab.impl();
  const auto deadline = std::chrono::steady_clock::now() + budget;
  size_t next = g.ahead_next(v.serial);
  if (next == SIZE_MAX) return true;
  const std::vector<std::pair<int32_t, int32_t>> positions = positions_by_depth(g);
  Walks walks;
  for (; next < positions.size(); ++next) {
    if (std::chrono::steady_clock::now() >= deadline) {
      g.set_ahead_next(v.serial, next);
      return false;
    }
    const auto [state, parent_state] = positions[next];
    if (g.find_masks(mask_key(v.serial, state, parent_state)) == nullptr) {
      compute_and_store(g, v, walks, state, parent_state);
    }
  }
  g.set_ahead_next(v.serial, SIZE_MAX);
  return true;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenVocab> vocab)
    : impl_(std::make_unique<Impl>(std::move(grammar), std::move(vocab))) {}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

void GrammarMatcher::fill_mask(uint32_t* mask) { impl_->fill_mask(mask); }
bool GrammarMatcher::accept(int32_t token) { return impl_->accept(token); }
size_t GrammarMatcher::allowed_prefix(const std::vector<int32_t>& tokens) {
  return impl_->allowed_prefix(tokens);
}
bool GrammarMatcher::can_end() const { return impl_->done || impl_->cur.end; }
bool GrammarMatcher::must_end() const {
  return impl_->done || (impl_->cur.frontier.empty() && impl_->cur.end);
}

}  // namespace mx
