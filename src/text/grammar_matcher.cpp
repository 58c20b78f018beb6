// The vocabulary trie and the matcher.
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
#include <climits>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "core/check.h"
#include "text/grammar_internal.h"

namespace mx {

using grammar::PositionMasks;

struct TokenVocab::Impl {
  enum Kind : uint8_t { kText, kStop, kNever };
  int32_t size = 0;
  uint64_t serial = 0;
  std::vector<std::string> bytes;
  std::vector<uint8_t> kind;
  std::vector<int32_t> stops;
  // The trie in pre-order, root left out: node i reads node_byte[i] at depth node_depth[i]
  // (1-based); its subtree is [i, node_end[i]); its tokens are toks[tok_begin[i]..
  // tok_begin[i + 1]), so a subtree's tokens are contiguous too.
  std::vector<uint8_t> node_byte;
  std::vector<int32_t> node_depth;
  std::vector<int32_t> node_end;
  std::vector<int32_t> tok_begin;
  std::vector<int32_t> toks;
  int32_t max_depth = 0;
  // Text below node i: the UTF-8 decoder state after its bytes (a Utf8 value), and the height
  // of its subtree when every path below it goes on as well-formed UTF-8 of plain characters
  // (no control character, quote or backslash), else -1. Inside a string such a subtree needs
  // no walk when its start state survives any such text that long.
  std::vector<uint8_t> utf8_state;
  std::vector<int16_t> text_height;
  // text_bits[L]: the tokens of at most L bytes (L <= kMaxTextHeight) that are plain text
  // from a character boundary (whole or ending inside a character): what a string-body
  // position that survives L bytes of any text accepts.
  std::vector<std::vector<uint32_t>> text_bits;
};

namespace {

std::atomic<uint64_t> g_vocab_serial{1};

bool is_plain(uint8_t b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }
constexpr int32_t kMaxTextHeight = 64;

// The well-formed UTF-8 decoder (RFC 3629: no overlongs, surrogates or code points past
// U+10FFFF), over plain characters: at a character boundary, or expecting continuation bytes
// (the range of the next one restricted after E0, ED, F0 and F4).
enum Utf8 : uint8_t {
  kBoundary,
  kCont1,
  kCont2,
  kContE0,
  kContED,
  kCont3,
  kContF0,
  kContF4,
  kUtf8States,
  kInvalid = kUtf8States
};

uint8_t utf8_next(uint8_t q, uint8_t b) {
  const bool cont = b >= 0x80 && b <= 0xBF;
  switch (q) {
    case kBoundary:
      if (b < 0x80) return is_plain(b) ? kBoundary : kInvalid;
      if (b >= 0xC2 && b <= 0xDF) return kCont1;
      if (b == 0xE0) return kContE0;
      if (b == 0xED) return kContED;
      if (b >= 0xE1 && b <= 0xEF) return kCont2;
      if (b == 0xF0) return kContF0;
      if (b == 0xF4) return kContF4;
      if (b >= 0xF1 && b <= 0xF3) return kCont3;
      return kInvalid;
    case kCont1:
      return cont ? kBoundary : kInvalid;
    case kCont2:
      return cont ? kCont1 : kInvalid;
    case kContE0:
      return b >= 0xA0 && b <= 0xBF ? kCont1 : kInvalid;
    case kContED:
      return b >= 0x80 && b <= 0x9F ? kCont1 : kInvalid;
    case kCont3:
      return cont ? kCont2 : kInvalid;
    case kContF0:
      return b >= 0x90 && b <= 0xBF ? kCont2 : kInvalid;
    case kContF4:
      return b >= 0x80 && b <= 0x8F ? kCont2 : kInvalid;
    default:
      return kInvalid;
  }
}

void build_trie(TokenVocab::Impl& v) {
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < v.size; ++t) {
    if (v.kind[t] == TokenVocab::Impl::kText) ids.push_back(t);
  }
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return v.bytes[a] != v.bytes[b] ? v.bytes[a] < v.bytes[b] : a < b;
  });
  std::vector<int32_t> path, tok_node;
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string_view w = v.bytes[id];
    size_t l = 0;
    while (l < prev.size() && l < w.size() && prev[l] == w[l]) ++l;
    path.resize(l);
    for (size_t k = l; k < w.size(); ++k) {
      path.push_back(static_cast<int32_t>(v.node_byte.size()));
      v.node_byte.push_back(static_cast<uint8_t>(w[k]));
      v.node_depth.push_back(static_cast<int32_t>(k + 1));
    }
    tok_node.push_back(path.back());
    v.toks.push_back(id);
    v.max_depth = std::max(v.max_depth, static_cast<int32_t>(w.size()));
    prev = w;
  }
  const int32_t n = static_cast<int32_t>(v.node_byte.size());
  v.tok_begin.assign(n + 1, 0);
  for (int32_t node : tok_node) ++v.tok_begin[node + 1];
  for (int32_t i = 0; i < n; ++i) v.tok_begin[i + 1] += v.tok_begin[i];
  v.node_end.assign(n, n);
  std::vector<int32_t> open;
  for (int32_t i = 0; i < n; ++i) {
    while (!open.empty() && v.node_depth[open.back()] >= v.node_depth[i]) {
      v.node_end[open.back()] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  v.utf8_state.assign(n, kInvalid);
  std::vector<uint8_t> at_depth(v.max_depth + 1, kBoundary);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t d = v.node_depth[i];
    const uint8_t up = at_depth[d - 1];
    v.utf8_state[i] = up == kInvalid ? uint8_t{kInvalid} : utf8_next(up, v.node_byte[i]);
    at_depth[d] = v.utf8_state[i];
  }
  v.text_height.assign(n, 0);
  for (int32_t i = n - 1; i >= 0; --i) {
    int32_t h = 0;
    for (int32_t c = i + 1; c < v.node_end[i] && h >= 0; c = v.node_end[c]) {
      h = v.utf8_state[c] == kInvalid || v.text_height[c] < 0
              ? -1
              : std::max<int32_t>(h, v.text_height[c] + 1);
    }
    v.text_height[i] = static_cast<int16_t>(h > kMaxTextHeight ? -1 : h);
  }
  v.text_bits.assign(kMaxTextHeight + 1,
                     std::vector<uint32_t>((static_cast<size_t>(v.size) + 31) / 32, 0));
  for (int32_t i = 0; i < n; ++i) {
    if (v.utf8_state[i] == kInvalid || v.node_depth[i] > kMaxTextHeight) continue;
    for (int32_t k = v.tok_begin[i]; k < v.tok_begin[i + 1]; ++k) {
      v.text_bits[v.node_depth[i]][v.toks[k] >> 5] |= 1u << (v.toks[k] & 31);
    }
  }
  for (int32_t len = 1; len <= kMaxTextHeight; ++len) {
    for (size_t w = 0; w < v.text_bits[len].size(); ++w) {
      v.text_bits[len][w] |= v.text_bits[len - 1][w];
    }
  }
}

constexpr int32_t kNoParent = -1;  // below the bottom frame: the grammar's (or a walk's) end
// A walk automaton kept between positions is dropped past this many states.
constexpr size_t kMaxKeptWalkStates = 1 << 16;

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
  WalkAutomaton(const Grammar& g, int32_t parent_state) : stepper_(g, pool_) {
    below_ = parent_state < 0 ? kNoParent : pool_.intern(parent_state, kNoParent);
    // Bytes that no edge of the grammar and no step of the UTF-8 decoder tell apart behave
    // alike everywhere: one representative per run between cut points is enough.
    std::array<bool, 257> cut{};
    for (const grammar::ByteEdge& e : g.byte_edges) {
      cut[e.lo] = true;
      cut[e.hi + 1] = true;
    }
    for (int b : {0x20, 0x22, 0x23, 0x5C, 0x5D, 0x7F, 0x80, 0x90, 0xA0, 0xC0, 0xC2, 0xE0, 0xE1,
                  0xED, 0xEE, 0xF0, 0xF1, 0xF4, 0xF5}) {
      cut[b] = true;
    }
    cut[0] = true;
    for (int b = 0; b < 256; ++b) {
      if (cut[b]) reps_.push_back(static_cast<uint8_t>(b));
    }
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
  bool alive(int32_t s) const { return !states_[s].frontier.empty(); }
  bool end(int32_t s) const { return states_[s].end; }

  // Every state that plain UTF-8 text leads to from walk state `s`, the decoder being in
  // `q`, within `depth` bytes is alive. Such bytes mostly share their targets (inside a string,
  // one per decoder state), so the recursion runs over the distinct (target, decoder state)
  // pairs; each (state, q, depth) is decided once.
  bool text_safe(int32_t s, uint8_t q, int32_t depth) {
    if (!alive(s)) return false;
    if (depth == 0) return true;
    // Safe to a depth is safe to every smaller one, unsafe to every larger one.
    Known& k = known_[(static_cast<uint64_t>(s) << 8) | q];
    if (depth <= k.safe) return true;
    if (depth >= k.unsafe) return false;
    bool ok = true;
    for (const auto& [t, tq] : text_targets(s, q)) {
      if (!text_safe(t, tq, depth - 1)) {
        ok = false;
        break;
      }
    }
    Known& after = known_[(static_cast<uint64_t>(s) << 8) | q];  // the map may have grown
    if (ok) {
      after.safe = std::max(after.safe, depth);
    } else {
      after.unsafe = std::min(after.unsafe, depth);
    }
    return ok;
  }

 private:
  static constexpr int32_t kDenseStates = 4096;

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
      if (states_.size() <= kDenseStates) dense_.resize(states_.size() * 256, -1);
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
  std::unordered_map<uint64_t, Known> known_;
  std::unordered_map<uint64_t, std::vector<std::pair<int32_t, uint8_t>>> text_targets_;
  std::vector<uint8_t> reps_;
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
  const int32_t n = static_cast<int32_t>(v.node_byte.size());
  for (int32_t i = 0; i < n;) {
    const int32_t d = v.node_depth[i];
    if (all_text && v.utf8_state[i] != kInvalid && v.text_height[i] >= 0 &&
        d + v.text_height[i] <= text_depth) {
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
    if (alive && v.text_height[i] > 0 && walk.text_safe(cur, v.utf8_state[i], v.text_height[i])) {
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

}  // namespace

TokenVocab::TokenVocab(const std::vector<std::string>& token_bytes,
                       const std::vector<int32_t>& stop_ids,
                       const std::vector<int32_t>& special_ids)
    : impl_(std::make_unique<Impl>()) {
  Impl& v = *impl_;
  v.size = static_cast<int32_t>(token_bytes.size());
  v.serial = g_vocab_serial.fetch_add(1);
  v.bytes = token_bytes;
  v.kind.assign(v.size, Impl::kText);
  for (int32_t t = 0; t < v.size; ++t) {
    if (v.bytes[t].empty()) v.kind[t] = Impl::kNever;
  }
  // Ids outside the vocabulary are ignored: there is no token to allow or forbid.
  for (int32_t t : special_ids) {
    if (t >= 0 && t < v.size) v.kind[t] = Impl::kNever;
  }
  for (int32_t t : stop_ids) {
    if (t >= 0 && t < v.size && v.kind[t] != Impl::kStop) {
      v.kind[t] = Impl::kStop;
      v.stops.push_back(t);
    }
  }
  build_trie(v);
}

TokenVocab::~TokenVocab() = default;
int32_t TokenVocab::size() const { return impl_->size; }

struct GrammarMatcher::Impl {
  Impl(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> token_vocab)
      : g(std::move(grammar)), vocab(std::move(token_vocab)), v(vocab->impl()), stepper(*g, pool) {
    stepper.start(pool.intern(g->rule_start[g->root_rule], kNoParent), cur);
  }

  // The state after `bytes` from `cur`, or null when they leave the grammar.
  const ParseState* consume(std::string_view bytes) {
    const ParseState* in = &cur;
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
    const uint64_t key = (v.serial << 40) | pos;
    const PositionMasks* m = g->find_masks(key);
    if (m == nullptr) {
      // One walk automaton per frame below, kept for the request: the positions of one
      // value (a bounded string's counter, say) meet the same walk states again.
      std::unique_ptr<WalkAutomaton>& walk = walks[parent_state];
      if (!walk || walk->states() > kMaxKeptWalkStates) {
        walk = std::make_unique<WalkAutomaton>(*g, parent_state);
      }
      m = g->insert_masks(key, compute_masks(*g, v, *walk, pool.state(node), parent_state));
    }
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

  std::shared_ptr<const Grammar> g;
  std::shared_ptr<const TokenVocab> vocab;
  const TokenVocab::Impl& v;
  NodePool pool;
  Stepper stepper;
  ParseState cur, a, b;
  bool done = false;  // a stop token was accepted: nothing more comes
  // Positions met so far (see masks_of), from the grammar's cache.
  std::unordered_map<uint64_t, const PositionMasks*> masks;
  std::unordered_map<int32_t, std::unique_ptr<WalkAutomaton>> walks;
  std::vector<const PositionMasks*> tops;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar,
                               std::shared_ptr<const TokenVocab> vocab)
    : impl_(std::make_unique<Impl>(std::move(grammar), std::move(vocab))) {}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

void GrammarMatcher::fill_mask(uint32_t* mask) { impl_->fill_mask(mask); }
bool GrammarMatcher::accept(int32_t token) { return impl_->accept(token); }
bool GrammarMatcher::can_end() const { return impl_->done || impl_->cur.end; }
bool GrammarMatcher::must_end() const {
  return impl_->done || (impl_->cur.frontier.empty() && impl_->cur.end);
}

}  // namespace mx
