// One cache line asked for ahead, into L1 or L2, for the kernels that read a stream the
// hardware prefetcher does not follow (mx_prefetch.h, attention_simd.h).
#pragma once

namespace mx {
// Internal linkage: ISA translation units compiled with different flags include this.
namespace {

// A prefetch that stays: GCC deletes a loop whose only work is _mm_prefetch.
inline void prefetch_line(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}
inline void prefetch_line_l2(const void* p) {
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

}  // namespace
}  // namespace mx
