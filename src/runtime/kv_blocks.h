// The paged KV cache's bookkeeping: a fixed pool of blocks of `block_size` token slots and a
// block table per sequence. Pure logic; the tensors live with the model.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace mx {

class BlockAllocator {
 public:
  BlockAllocator(int32_t num_blocks, int32_t block_size);

  int32_t num_blocks() const { return static_cast<int32_t>(in_use_.size()); }
  int32_t block_size() const { return block_size_; }
  int32_t free_blocks() const { return static_cast<int32_t>(free_.size()); }
  int32_t used_blocks() const { return num_blocks() - free_blocks(); }
  static int32_t blocks_for(int64_t tokens, int32_t block_size) {
    return static_cast<int32_t>((tokens + block_size - 1) / block_size);
  }

  // All `n` blocks or none.
  bool allocate(int32_t n, std::vector<int32_t>* out);
  // Returns blocks to the pool; a block that is not in use (double free, foreign id) is an
  // error and changes nothing.
  Status release(const std::vector<int32_t>& blocks);

 private:
  int32_t block_size_;
  std::vector<int32_t> free_;  // LIFO: recently freed blocks are warm in cache
  std::vector<uint8_t> in_use_;
};

// A sequence's block table: token t lives in blocks[t / block_size] at slot t % block_size.
struct BlockTable {
  std::vector<int32_t> blocks;
  int64_t tokens = 0;  // slots in use
  // Grows the table to hold `tokens` tokens; false (and unchanged) when the pool runs out.
  bool reserve(int64_t tokens, BlockAllocator* alloc);
  Status release(BlockAllocator* alloc);
};

}  // namespace mx
