#include "runtime/kv_blocks.h"

#include "core/check.h"

namespace mx {

BlockAllocator::BlockAllocator(int32_t num_blocks, int32_t block_size)
    : block_size_(block_size), in_use_(static_cast<size_t>(num_blocks), 0) {
  MX_CHECK(num_blocks >= 0 && block_size > 0);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockAllocator::allocate(int32_t n, std::vector<int32_t>* out) {
  if (n < 0 || n > free_blocks()) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(b)] = 1;
    out->push_back(b);
  }
  return true;
}

Status BlockAllocator::release(const std::vector<int32_t>& blocks) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int32_t b = blocks[i];
    bool repeated = false;
    for (size_t j = 0; j < i; ++j) repeated |= blocks[j] == b;
    if (b < 0 || b >= num_blocks() || !in_use_[static_cast<size_t>(b)] || repeated) {
      return invalid_argument("KV block " + std::to_string(b) + " released but not in use");
    }
  }
  for (int32_t b : blocks) {
    in_use_[static_cast<size_t>(b)] = 0;
    free_.push_back(b);
  }
  return Status::ok();
}

bool BlockTable::reserve(int64_t n, BlockAllocator* alloc) {
  const int32_t need =
      BlockAllocator::blocks_for(n, alloc->block_size()) - static_cast<int32_t>(blocks.size());
  if (need > 0 && !alloc->allocate(need, &blocks)) return false;
  if (n > tokens) tokens = n;
  return true;
}

Status BlockTable::release(BlockAllocator* alloc) {
  Status s = alloc->release(blocks);
  blocks.clear();
  tokens = 0;
  return s;
}

}  // namespace mx
