// The vocabulary trie: built once per tokenizer and shared by every grammar and matcher.
#include <algorithm>
#include <atomic>
#include <string_view>
#include <unordered_map>

#include "text/grammar_vocab.h"

namespace mx {

using namespace grammar;

namespace {

std::atomic<uint64_t> g_vocab_serial{1};

struct ByteSetHash {
  size_t operator()(const grammar::ByteSet& b) const {
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (uint64_t w : b.w) h = (h ^ w) * 0x100000001B3ull + (h >> 29);
    return static_cast<size_t>(h);
  }
};
struct ByteSetEq {
  bool operator()(const grammar::ByteSet& a, const grammar::ByteSet& b) const { return a.w == b.w; }
};

void build_below_sets(TokenVocab::Impl& v) {
  const int32_t n = static_cast<int32_t>(v.node_byte.size());
  std::vector<grammar::ByteSet> below(n);
  v.height.assign(n, 0);
  for (int32_t i = n - 1; i >= 0; --i) {
    for (int32_t c = i + 1; c < v.node_end[i]; c = v.node_end[c]) {
      below[i] |= below[c];
      below[i].add(v.node_byte[c], v.node_byte[c]);
      v.height[i] = static_cast<int16_t>(std::max<int32_t>(v.height[i], v.height[c] + 1));
    }
  }
  grammar::ByteSet plain;
  for (int b = 0; b < 0x80; ++b) {
    if (is_plain(static_cast<uint8_t>(b))) plain.add(b, b);
  }
  v.ascii_subtree.assign(n, 0);
  std::vector<uint8_t> path_plain(v.max_depth + 1, 1);
  for (int32_t i = 0; i < n; ++i) {
    const int32_t d = v.node_depth[i];
    path_plain[d] = path_plain[d - 1] && is_plain(v.node_byte[i]);
    const grammar::ByteSet& b = below[i];
    v.ascii_subtree[i] = path_plain[d] && (b.w[0] & ~plain.w[0]) == 0 &&
                         (b.w[1] & ~plain.w[1]) == 0 && (b.w[2] | b.w[3]) == 0;
  }
  std::unordered_map<grammar::ByteSet, int32_t, ByteSetHash, ByteSetEq> ids;
  v.below_set.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    auto [it, inserted] = ids.try_emplace(below[i], static_cast<int32_t>(v.sets.size()));
    if (inserted) v.sets.push_back(below[i]);
    v.below_set[i] = it->second;
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
  build_below_sets(v);
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

}  // namespace mx
