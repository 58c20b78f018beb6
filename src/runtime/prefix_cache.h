// Prefix caching (as SGLang's RadixAttention and vLLM's automatic prefix caching): a radix tree
// whose nodes are full KV blocks, each keyed by its block_size token ids under its parent, so
// that a node stands for the whole token prefix from the root to it. Two blocks with equal
// tokens at different prefixes are different nodes. A request that starts with a cached prefix
// reads those blocks instead of computing them again.
//
// Pure logic over block ids; the allocator stays the scheduler's. A block in the tree is in use
// for the allocator until the tree evicts it. Running requests reference the cached blocks they
// read (always a path from the root, so a parent has at least its children's references); a
// referenced block is never evicted. Unreferenced leaves are evicted least recently used first,
// where use is a reference taken or dropped, or an insertion.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "core/status.h"

namespace mx {

class PrefixCache {
 public:
  explicit PrefixCache(int32_t block_size);

  int32_t block_size() const { return block_size_; }
  int32_t cached_blocks() const { return cached_; }
  // Cached blocks no request references: what evict() can free.
  int32_t evictable_blocks() const { return cached_ - referenced_; }
  bool contains(int32_t block) const;
  int32_t refs(int32_t block) const;  // 0 for a block not in the tree

  // The cached blocks of the longest prefix of tokens[0, n) made of whole blocks; takes no
  // reference (acquire does).
  std::vector<int32_t> match(const int32_t* tokens, int64_t n) const;
  // Takes (drops) one reference to each block. A block not in the tree, or released without a
  // reference, is an error and changes nothing.
  Status acquire(const std::vector<int32_t>& blocks);
  Status release(const std::vector<int32_t>& blocks);

  // Adds the full blocks [held, full_blocks) of a sequence's table `blocks` (tokens: the
  // sequence's ids, at least full_blocks * block_size of them), whose first `held` blocks are
  // already cached and referenced by the caller. Each added block gets the caller's reference.
  // Where the tree already holds a block with the same prefix, the caller's copy is appended to
  // `duplicates` (for the caller to free) and its table entry becomes the cached block.
  void insert(const int32_t* tokens, int32_t full_blocks, int32_t held,
              std::vector<int32_t>* blocks, std::vector<int32_t>* duplicates);

  // Removes up to n unreferenced leaves, least recently used first (ties: the lower block id);
  // a parent whose last child goes becomes a leaf in its turn. Appends the removed blocks to
  // `freed` for the allocator and returns how many.
  int32_t evict(int32_t n, std::vector<int32_t>* freed);

 private:
  // Orders child keys, and finds a key given as a plain token range.
  struct KeyLess {
    using is_transparent = void;
    struct Range {
      const int32_t* begin;
      const int32_t* end;
    };
    static Range range(const std::vector<int32_t>& v) { return {v.data(), v.data() + v.size()}; }
    static Range range(const Range& r) { return r; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      const Range x = range(a), y = range(b);
      return std::lexicographical_compare(x.begin, x.end, y.begin, y.end);
    }
  };
  static constexpr int32_t kRoot = -1;
  struct Node {
    bool cached = false;
    int32_t parent = kRoot;
    int32_t refs = 0;
    uint64_t last_used = 0;
    std::vector<int32_t> key;  // this block's tokens
    std::map<std::vector<int32_t>, int32_t, KeyLess> children;
  };
  Node& node(int32_t b) { return b == kRoot ? root_ : nodes_[static_cast<size_t>(b)]; }
  const Node* find(int32_t b) const;
  void touch(Node& n) { n.last_used = ++clock_; }

  int32_t block_size_;
  Node root_;
  std::vector<Node> nodes_;  // by block id, grown as blocks arrive
  int32_t cached_ = 0, referenced_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace mx
