// Pieces that the microbenchmarks of several files share.
#pragma once

#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/thread_pool.h"

namespace mx {

// Sums [p, p + bytes) in 256-bit loads, four chains, as bench's bandwidth probe reads: the
// read a GEMV's weights cost at best.
__attribute__((target("avx2"))) inline uint64_t read_words(const uint8_t* p, size_t bytes) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 3));
}

// Seconds spent in each of two jobs over `panels` column panels on a two-thread pool, run one
// after the other in every iteration, so that both meet the same neighbours.
template <typename A, typename B>
std::pair<double, double> time_alternating(benchmark::State& state, ThreadPool& pool,
                                           int64_t panels, A&& first, B&& second) {
  double first_s = 0, second_s = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(panels, first);
    auto t1 = std::chrono::steady_clock::now();
    pool.parallel_for(panels, second);
    auto t2 = std::chrono::steady_clock::now();
    first_s += std::chrono::duration<double>(t1 - t0).count();
    second_s += std::chrono::duration<double>(t2 - t1).count();
  }
  return {first_s, second_s};
}

}  // namespace mx
