// Buffers that a forward pass borrows by slot. Each slot keeps the largest size it has been
// asked for, so steps after the first neither allocate nor fault in fresh pages: a 512-token
// prefill of a 30B-A3B-shaped layer would otherwise map and zero-fill about 30 MB of
// activations per layer. One pass at a time uses a workspace (a model runs one forward at a
// time); contents are whatever the slot's last user left.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace mx {

class Workspace {
 public:
  float* floats(int slot, int64_t n) {
    if (static_cast<size_t>(slot) >= bufs_.size()) bufs_.resize(static_cast<size_t>(slot) + 1);
    Buffer& b = bufs_[static_cast<size_t>(slot)];
    if (n > b.capacity) {
      b.data = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n));
      b.capacity = n;
    }
    return b.data.get();
  }
  uint64_t bytes() const {
    uint64_t total = 0;
    for (const Buffer& b : bufs_) total += static_cast<uint64_t>(b.capacity) * sizeof(float);
    return total;
  }

 private:
  struct Buffer {
    std::unique_ptr<float[]> data;
    int64_t capacity = 0;
  };
  std::vector<Buffer> bufs_;
};

}  // namespace mx
