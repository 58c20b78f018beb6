// Buffers that a forward pass borrows by slot. Each slot keeps the largest size it has been
// asked for, so steps after the first neither allocate nor fault in fresh pages: a 512-token
// prefill of a 30B-A3B-shaped layer would otherwise map and zero-fill about 30 MB of
// activations per layer. One pass at a time uses a workspace (a model runs one forward at a
// time); contents are whatever the slot's last user left.
//
// Slot numbers are shared by every layer that borrows from one workspace, so each layer owns a
// range that starts where the range of the layer below it ends (quant/linear.h, then
// model/blocks.h): a block's slot survives the linears it calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "core/check.h"

namespace mx {

// n rounded up to one of eight steps per power of two (64 at least). A request that grows a
// little every step, such as scratch that follows a sequence's length, then makes its slot
// reallocate a few times per doubling instead of on every step, at a cost of an eighth at most.
constexpr int64_t workspace_steps(int64_t n) {
  if (n <= 64) return 64;
  int64_t top = 64;
  while (top * 2 <= n) top *= 2;
  const int64_t unit = top / 8;
  return (n + unit - 1) / unit * unit;
}

class Workspace {
 public:
  // At least n values of T in `slot`, 64-byte aligned (a cache line, and the widest vector
  // load), not initialized.
  template <typename T>
  T* get(int slot, int64_t n) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= kAlign);
    return static_cast<T*>(raw(slot, static_cast<size_t>(n) * sizeof(T)));
  }
  float* floats(int slot, int64_t n) { return get<float>(slot, n); }

  // The T kept in object slot `slot` (numbered apart from the buffer slots), made on first use
  // and kept, with whatever capacity its last user gave it. One type per slot.
  template <typename T>
  T& object(int slot) {
    if (static_cast<size_t>(slot) >= objects_.size()) {
      objects_.resize(static_cast<size_t>(slot) + 1);
    }
    Object& o = objects_[static_cast<size_t>(slot)];
    if (o.ptr == nullptr) {
      o.ptr = ObjectPtr(new T(), [](void* p) { delete static_cast<T*>(p); });
      o.type = &kTypeTag<T>;
    }
    MX_CHECK_MSG(o.type == &kTypeTag<T>, "a workspace object slot holds another type");
    return *static_cast<T*>(o.ptr.get());
  }

  // Bytes held by the buffer slots.
  uint64_t bytes() const {
    uint64_t total = 0;
    for (const Buffer& b : bufs_) total += b.capacity;
    return total;
  }

 private:
  static constexpr size_t kAlign = 64;
  template <typename T>
  static constexpr char kTypeTag = 0;

  void* raw(int slot, size_t bytes) {
    if (static_cast<size_t>(slot) >= bufs_.size()) bufs_.resize(static_cast<size_t>(slot) + 1);
    Buffer& b = bufs_[static_cast<size_t>(slot)];
    if (bytes > b.capacity) {
      b.data.reset();  // the old contents go first: a slot never holds two sizes at once
      b.data.reset(::operator new (bytes, std::align_val_t{kAlign}));
      b.capacity = bytes;
    }
    return b.data.get();
  }

  struct AlignedDelete {
    void operator()(void* p) const { ::operator delete (p, std::align_val_t{kAlign}); }
  };
  struct Buffer {
    std::unique_ptr<void, AlignedDelete> data;
    size_t capacity = 0;
  };
  using ObjectPtr = std::unique_ptr<void, void (*)(void*)>;
  struct Object {
    ObjectPtr ptr{nullptr, nullptr};
    const void* type = nullptr;
  };
  std::vector<Buffer> bufs_;
  std::vector<Object> objects_;
};

}  // namespace mx
