// Memory for large buffers written once and then streamed for the life of a model: packed
// weights and the recurrent states (the KV cache stays on small pages: a short sequence would
// touch a 2 MB page per layer). It comes from 2 MB-aligned mappings marked
// for transparent huge pages. A decode step streams every weight once, and on 4 KB pages
// each new page is a page walk that the memory reads behind it wait for: on the Zen 4 a
// two-thread read streamed 29 GB/s from 4 KB pages and 37 GB/s from 2 MB ones.
//
// Buffers are carved from shared 64 MB mappings, so that thousands of small expert matrices
// do not each round up to 2 MB; a mapping is returned when everything carved from it has
// been freed, and space freed before then is not reused. Buffers that are resized again and
// again belong on the ordinary heap. Under AddressSanitizer the ordinary heap serves every
// call, so that overruns of these buffers are still caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace mx {

// 64-byte aligned; throws std::bad_alloc when the memory cannot be mapped.
void* huge_alloc(size_t bytes);
// p from huge_alloc(bytes) with the same bytes; null is ignored.
void huge_free(void* p, size_t bytes) noexcept;

// Bytes mapped by the arena now, for tests.
uint64_t huge_mapped_bytes();

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(huge_alloc(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { huge_free(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using HugeVector = std::vector<T, HugePageAllocator<T>>;

// A huge_alloc buffer owned like std::unique_ptr<T[]>: not value-initialized, so that pages
// nobody writes (the slots no sequence holds yet) cost no memory.
template <typename T>
class HugeArray {
 public:
  HugeArray() = default;
  explicit HugeArray(size_t n) : p_(static_cast<T*>(huge_alloc(bytes_of(n)))), n_(n) {}
  ~HugeArray() { huge_free(p_, n_ * sizeof(T)); }
  HugeArray(HugeArray&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  HugeArray& operator=(HugeArray&& o) noexcept {
    if (this != &o) {
      huge_free(p_, n_ * sizeof(T));
      p_ = o.p_, n_ = o.n_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  HugeArray(const HugeArray&) = delete;
  HugeArray& operator=(const HugeArray&) = delete;
  T* get() const { return p_; }

 private:
  static size_t bytes_of(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return n * sizeof(T);
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace mx
