#include "core/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>

#include "core/check.h"

#if defined(__SANITIZE_ADDRESS__)
#define MX_HUGE_PAGES_ON_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MX_HUGE_PAGES_ON_HEAP 1
#endif
#endif

namespace mx {
namespace {

constexpr size_t kAlign = 64;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Past this no mapping can succeed, and the roundings below would wrap.
void check_size(size_t bytes) {
  if (bytes > static_cast<size_t>(PTRDIFF_MAX)) throw std::bad_alloc();
}

#ifndef MX_HUGE_PAGES_ON_HEAP
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kArenaBytes = size_t{64} << 20;
// Larger buffers get a mapping of their own, rounded up to whole huge pages.
constexpr size_t kOwnMapping = kArenaBytes / 4;

// `bytes` (whole huge pages) at a 2 MB boundary: the kernel backs an aligned range with huge
// pages as it is first touched.
void* map_aligned(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* p = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t base = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = round_up(base, kHugePage);
  if (start > base) ::munmap(p, start - base);
  const uintptr_t end = start + bytes;
  if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
  // Where transparent huge pages are off this fails or does nothing, and the buffer simply
  // stays on small pages.
  ::madvise(reinterpret_cast<void*>(start), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(start);
}

struct Mapping {
  size_t bytes = 0;
  size_t used = 0;  // carved so far (arena mappings)
  int64_t live = 0;
};

class Arena {
 public:
  void* alloc(size_t bytes) {
    check_size(bytes);
    bytes = round_up(bytes == 0 ? 1 : bytes, kAlign);
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes >= kOwnMapping) {
      const size_t size = round_up(bytes, kHugePage);
      void* p = map_aligned(size);
      maps_[reinterpret_cast<uintptr_t>(p)] = Mapping{size, size, 1};
      mapped_ += size;
      return p;
    }
    if (current_ == 0 || maps_[current_].used + bytes > kArenaBytes) {
      // The old arena is left to its buffers; it goes when the last of them does.
      current_ = reinterpret_cast<uintptr_t>(map_aligned(kArenaBytes));
      maps_[current_] = Mapping{kArenaBytes, 0, 0};
      mapped_ += kArenaBytes;
    }
    Mapping& m = maps_[current_];
    void* p = reinterpret_cast<void*>(current_ + m.used);
    m.used += bytes;
    ++m.live;
    return p;
  }

  void free(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = maps_.upper_bound(a);
    MX_CHECK(it != maps_.begin());
    it = std::prev(it);
    MX_CHECK(a < it->first + it->second.bytes && it->second.live > 0);
    if (--it->second.live > 0) return;
    // The pages go back with the mapping; the next buffer maps a fresh arena.
    if (it->first == current_) current_ = 0;
    unmap(it->first);
  }

  uint64_t mapped() {
    std::lock_guard<std::mutex> lock(mu_);
    return mapped_;
  }

 private:
  void unmap(uintptr_t base) {
    auto it = maps_.find(base);
    ::munmap(reinterpret_cast<void*>(base), it->second.bytes);
    mapped_ -= it->second.bytes;
    maps_.erase(it);
  }

  std::mutex mu_;
  std::map<uintptr_t, Mapping> maps_;
  uintptr_t current_ = 0;
  uint64_t mapped_ = 0;
};

Arena& arena() {
  // Never destroyed: buffers in static objects may be freed after main returns.
  static Arena* a = new Arena();
  return *a;
}

#endif

}  // namespace

#ifdef MX_HUGE_PAGES_ON_HEAP
void* huge_alloc(size_t bytes) {
  check_size(bytes);
  void* p = std::aligned_alloc(kAlign, round_up(bytes == 0 ? 1 : bytes, kAlign));
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void huge_free(void* p, size_t) noexcept { std::free(p); }
uint64_t huge_mapped_bytes() { return 0; }
#else
void* huge_alloc(size_t bytes) { return arena().alloc(bytes); }
void huge_free(void* p, size_t) noexcept {
  if (p != nullptr) arena().free(p);
}
uint64_t huge_mapped_bytes() { return arena().mapped(); }
#endif

}  // namespace mx
