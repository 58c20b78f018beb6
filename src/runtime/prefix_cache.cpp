#include "runtime/prefix_cache.h"

#include <queue>
#include <string>
#include <utility>

#include "core/check.h"

namespace mx {

PrefixCache::PrefixCache(int32_t block_size) : block_size_(block_size) { MX_CHECK(block_size > 0); }

const PrefixCache::Node* PrefixCache::find(int32_t b) const {
  if (b < 0 || static_cast<size_t>(b) >= nodes_.size() || !nodes_[static_cast<size_t>(b)].cached)
    return nullptr;
  return &nodes_[static_cast<size_t>(b)];
}

bool PrefixCache::contains(int32_t block) const { return find(block) != nullptr; }

int32_t PrefixCache::refs(int32_t block) const {
  const Node* n = find(block);
  return n == nullptr ? 0 : n->refs;
}

std::vector<int32_t> PrefixCache::match(const int32_t* tokens, int64_t n) const {
  std::vector<int32_t> out;
  const Node* at = &root_;
  for (int64_t pos = 0; pos + block_size_ <= n; pos += block_size_) {
    auto it = at->children.find(KeyLess::Range{tokens + pos, tokens + pos + block_size_});
    if (it == at->children.end()) break;
    out.push_back(it->second);
    at = &nodes_[static_cast<size_t>(it->second)];
  }
  return out;
}

Status PrefixCache::acquire(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    if (find(b) == nullptr)
      return invalid_argument("KV block " + std::to_string(b) + " is not in the prefix cache");
  }
  for (int32_t b : blocks) {
    Node& n = node(b);
    if (n.refs++ == 0) ++referenced_;
    touch(n);
  }
  return Status::ok();
}

Status PrefixCache::release(const std::vector<int32_t>& blocks) {
  // Counted per block first, so that a block listed more often than it is referenced is
  // refused before anything changes.
  std::map<int32_t, int32_t> drops;
  for (int32_t b : blocks) {
    const Node* n = find(b);
    if (n == nullptr || ++drops[b] > n->refs) {
      return invalid_argument("KV block " + std::to_string(b) +
                              " released from the prefix cache without a reference");
    }
  }
  for (int32_t b : blocks) {
    Node& n = node(b);
    if (--n.refs == 0) --referenced_;
    touch(n);
  }
  return Status::ok();
}

void PrefixCache::insert(const int32_t* tokens, int32_t full_blocks, int32_t held,
                         std::vector<int32_t>* blocks, std::vector<int32_t>* duplicates) {
  MX_CHECK(held >= 0 && held <= full_blocks && full_blocks <= static_cast<int32_t>(blocks->size()));
  int32_t parent = kRoot;
  if (held > 0) {
    parent = (*blocks)[static_cast<size_t>(held - 1)];
    MX_CHECK(find(parent) != nullptr && find(parent)->refs > 0);
  }
  for (int32_t i = held; i < full_blocks; ++i) {
    const int32_t* key = tokens + static_cast<int64_t>(i) * block_size_;
    int32_t& mine = (*blocks)[static_cast<size_t>(i)];
    Node& p = node(parent);
    auto it = p.children.find(KeyLess::Range{key, key + block_size_});
    if (it != p.children.end()) {
      // Computed meanwhile by another request: the same tokens at the same positions give the
      // same keys and values, so this request reads the cached copy and frees its own.
      duplicates->push_back(mine);
      mine = it->second;
      MX_CHECK(acquire({mine}).is_ok());
    } else {
      MX_CHECK(mine >= 0 && find(mine) == nullptr);
      if (static_cast<size_t>(mine) >= nodes_.size()) nodes_.resize(static_cast<size_t>(mine) + 1);
      Node& n = nodes_[static_cast<size_t>(mine)];
      n.cached = true;
      n.parent = parent;
      n.refs = 1;
      n.key.assign(key, key + block_size_);
      n.children.clear();
      touch(n);
      node(parent).children.emplace(n.key, mine);
      ++cached_;
      ++referenced_;
    }
    parent = mine;
  }
}

int32_t PrefixCache::evict(int32_t n, std::vector<int32_t>* freed) {
  using Entry = std::pair<uint64_t, int32_t>;  // (last used, block): the smallest goes first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> leaves;
  for (size_t b = 0; b < nodes_.size(); ++b) {
    const Node& x = nodes_[b];
    if (x.cached && x.refs == 0 && x.children.empty())
      leaves.push({x.last_used, static_cast<int32_t>(b)});
  }
  int32_t evicted = 0;
  while (evicted < n && !leaves.empty()) {
    const int32_t b = leaves.top().second;
    leaves.pop();
    Node& x = node(b);
    Node& p = node(x.parent);
    p.children.erase(x.key);
    if (x.parent != kRoot && p.refs == 0 && p.children.empty())
      leaves.push({p.last_used, x.parent});
    x = Node();
    --cached_;
    freed->push_back(b);
    ++evicted;
  }
  return evicted;
}

}  // namespace mx
