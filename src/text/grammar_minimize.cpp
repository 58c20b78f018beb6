// Merging equivalent states of a compiled grammar.
//
// Subset construction keeps apart states that are different sets of raw states but accept
// the same continuations: inside a string body the state after a plain character, after a
// two-byte character, after an escape and after a surrogate pair are one place in the
// language, repeated for every count of a maxLength counter. Each is a position whose token
// mask the matcher computes, so the copies multiply the work ahead of the first document.
// States of one rule with the same finality and the same edges (targets taken up to the
// merges so far) accept the same continuations and are merged, from the ends of the rules
// backwards; merging one may make its predecessors equal, which are then looked at again.
#include <algorithm>
#include <numeric>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/grammar_internal.h"

namespace mx::grammar {
namespace {

class StateMerger {
 public:
  explicit StateMerger(const Grammar& g) : g_(g), rep_(g.states.size()), preds_(g.states.size()) {
    std::iota(rep_.begin(), rep_.end(), 0);
    for (int32_t s = 0; s < static_cast<int32_t>(g.states.size()); ++s) {
      const NfaState& st = g.states[s];
      for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
        preds_[g.byte_edges[e].target].push_back(s);
      }
      for (uint32_t c = st.call_begin; c < st.call_end; ++c)
        preds_[g.call_edges[c].ret].push_back(s);
    }
  }

  void run() {
    const auto n = static_cast<int32_t>(g_.states.size());
    std::vector<int32_t> work(n);
    std::iota(work.begin(), work.end(), 0);  // popped from the back: the ends of rules first
    std::vector<uint8_t> queued(n, 1);
    std::unordered_map<std::string, int32_t> by_signature;
    std::string sig, other;
    while (!work.empty()) {
      const int32_t s = work.back();
      work.pop_back();
      queued[s] = 0;
      if (find(s) != s) continue;
      signature(s, &sig);
      auto [it, inserted] = by_signature.try_emplace(sig, s);
      if (inserted || it->second == s) continue;
      const int32_t t = it->second;
      if (find(t) != t || (signature(t, &other), other != sig)) {
        it->second = s;  // t has changed since it was filed under this signature
        continue;
      }
      rep_[s] = t;
      for (int32_t p : preds_[s]) {
        if (!queued[p]) {
          queued[p] = 1;
          work.push_back(p);
        }
      }
      preds_[t].insert(preds_[t].end(), preds_[s].begin(), preds_[s].end());
      preds_[s].clear();
    }
  }

  // The merged states, numbered in their order, in place of `g`'s.
  void compact(Grammar* g) {
    Compacted out;
    std::vector<int32_t> id(g_.states.size(), -1);
    for (int32_t s = 0; s < static_cast<int32_t>(g_.states.size()); ++s) {
      if (find(s) != s) continue;
      id[s] = static_cast<int32_t>(out.states.size());
      out.states.emplace_back();
    }
    for (int32_t s = 0; s < static_cast<int32_t>(g_.states.size()); ++s) {
      if (id[s] < 0) continue;
      NfaState& st = out.states[id[s]];
      st.final = g_.states[s].final;
      st.byte_begin = static_cast<uint32_t>(out.byte_edges.size());
      for (const ByteEdge& e : byte_edges(s)) out.byte_edges.push_back({e.lo, e.hi, id[e.target]});
      st.byte_end = static_cast<uint32_t>(out.byte_edges.size());
      st.call_begin = static_cast<uint32_t>(out.call_edges.size());
      for (const CallEdge& c : call_edges(s)) out.call_edges.push_back({c.rule, id[c.ret]});
      st.call_end = static_cast<uint32_t>(out.call_edges.size());
      out.state_rule.push_back(g_.state_rule[s]);
    }
    for (int32_t start : g_.rule_start) out.rule_start.push_back(id[find(start)]);
    g->states = std::move(out.states);
    g->byte_edges = std::move(out.byte_edges);
    g->call_edges = std::move(out.call_edges);
    g->state_rule = std::move(out.state_rule);
    g->rule_start = std::move(out.rule_start);
  }

 private:
  struct Compacted {
    std::vector<NfaState> states;
    std::vector<ByteEdge> byte_edges;
    std::vector<CallEdge> call_edges;
    std::vector<int32_t> state_rule, rule_start;
  };

  int32_t find(int32_t s) {
    while (rep_[s] != s) s = rep_[s] = rep_[rep_[s]];
    return s;
  }

  // The byte edges of `s` with merged targets, sorted, adjacent ranges to one target joined.
  const std::vector<ByteEdge>& byte_edges(int32_t s) {
    const NfaState& st = g_.states[s];
    bytes_.clear();
    for (uint32_t e = st.byte_begin; e < st.byte_end; ++e) {
      const ByteEdge& b = g_.byte_edges[e];
      bytes_.push_back({b.lo, b.hi, find(b.target)});
    }
    std::sort(bytes_.begin(), bytes_.end(), [](const ByteEdge& a, const ByteEdge& b) {
      return a.lo != b.lo ? a.lo < b.lo : a.target < b.target;
    });
    size_t k = 0;
    for (const ByteEdge& e : bytes_) {
      if (k > 0 && bytes_[k - 1].target == e.target && bytes_[k - 1].hi + 1 == e.lo) {
        bytes_[k - 1].hi = e.hi;
      } else {
        bytes_[k++] = e;
      }
    }
    bytes_.resize(k);
    return bytes_;
  }

  const std::vector<CallEdge>& call_edges(int32_t s) {
    const NfaState& st = g_.states[s];
    calls_.clear();
    for (uint32_t c = st.call_begin; c < st.call_end; ++c) {
      calls_.push_back({g_.call_edges[c].rule, find(g_.call_edges[c].ret)});
    }
    std::sort(calls_.begin(), calls_.end(), [](const CallEdge& a, const CallEdge& b) {
      return a.rule != b.rule ? a.rule < b.rule : a.ret < b.ret;
    });
    calls_.erase(std::unique(calls_.begin(), calls_.end(),
                             [](const CallEdge& a, const CallEdge& b) {
                               return a.rule == b.rule && a.ret == b.ret;
                             }),
                 calls_.end());
    return calls_;
  }

  void signature(int32_t s, std::string* out) {
    out->clear();
    const std::vector<ByteEdge>& bytes = byte_edges(s);
    const int32_t head[3] = {g_.state_rule[s], g_.states[s].final ? 1 : 0,
                             static_cast<int32_t>(bytes.size())};
    out->append(reinterpret_cast<const char*>(head), sizeof(head));
    for (const ByteEdge& e : bytes) {
      const int32_t edge[2] = {(e.lo << 8) | e.hi, e.target};
      out->append(reinterpret_cast<const char*>(edge), sizeof(edge));
    }
    for (const CallEdge& c : call_edges(s)) {
      const int32_t call[2] = {c.rule, c.ret};
      out->append(reinterpret_cast<const char*>(call), sizeof(call));
    }
  }

  const Grammar& g_;
  std::vector<int32_t> rep_;
  std::vector<std::vector<int32_t>> preds_;
  std::vector<ByteEdge> bytes_;
  std::vector<CallEdge> calls_;
};

}  // namespace

void merge_equivalent_states(Grammar* g) {
  StateMerger m(*g);
  m.run();
  m.compact(g);
}

}  // namespace mx::grammar
