// Helpers shared by the AVX2 kernels' translation units (compiled with AVX2 flags only).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace mx::avx2 {

// The first n (< 16) of the sixteen outputs lo, hi; out of line so that a tile's accumulators
// never have their address taken.
__attribute__((noinline)) inline void store_partial(float* y, __m256 lo, __m256 hi, int64_t n) {
  alignas(32) float tmp[16];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  std::copy(tmp, tmp + n, y);
}

}  // namespace mx::avx2
