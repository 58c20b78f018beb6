// Scoped floating-point environment for kernels whose values can decay below FP32's normal
// range, where x86 cores take a microcode assist for every operation that reads or writes a
// subnormal (two orders of magnitude slower per operation on some cores).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace mx {

// Sets flush-to-zero and denormals-are-zero on this thread until it goes out of scope: a
// subnormal result becomes zero, and a subnormal operand reads as zero.
class FlushSubnormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }
#else
  FlushSubnormals() = default;
#endif
  FlushSubnormals(const FlushSubnormals&) = delete;
  FlushSubnormals& operator=(const FlushSubnormals&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned kFtz = 0x8000, kDaz = 0x0040;  // MXCSR bits 15 and 6
  unsigned saved_;
#endif
};

}  // namespace mx
