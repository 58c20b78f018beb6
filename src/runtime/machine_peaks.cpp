#include "runtime/machine_peaks.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"

namespace mx {
namespace {

// `reps` timings of fn(thread) run on every thread at once, in ops per second.
template <typename Fn>
std::vector<double> rates(ThreadPool& pool, int reps, Fn fn) {
  const int threads = pool.num_threads();
  std::vector<double> out;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> ops(static_cast<size_t>(threads), 0.0);
    const auto start = std::chrono::steady_clock::now();
    pool.parallel_for(threads, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) ops[static_cast<size_t>(t)] = fn(t);
    });
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double total = 0;
    for (double o : ops) total += o;
    out.push_back(total / s);
  }
  return out;
}

// The arithmetic peaks: the best of `reps`, as nothing but other processes slows them.
template <typename Fn>
double best_rate(ThreadPool& pool, int reps, Fn fn) {
  const std::vector<double> r = rates(pool, reps, fn);
  return *std::max_element(r.begin(), r.end());
}

double read_sum_scalar(const float* p, int64_t n, float* sink) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  *sink += s;
  return static_cast<double>(n) * sizeof(float);
}

}  // namespace

BandwidthProbe::BandwidthProbe(ThreadPool& pool, size_t bytes)
    : pool_(pool), bytes_(bytes / 128 * 128), sinks_(static_cast<size_t>(pool.num_threads()) * 16) {
  void* mem = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return;
  // On huge pages, as the weights are (core/huge_pages.h): the roofline is what the memory
  // delivers to the better of the two page sizes, not to a page walk every 4 KB.
  ::madvise(mem, bytes_, MADV_HUGEPAGE);
  buf_ = static_cast<float*>(mem);
  const int64_t n = static_cast<int64_t>(bytes_ / sizeof(float));
  pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
    std::memset(buf_ + b, 0, static_cast<size_t>(e - b) * sizeof(float));
  });
}

BandwidthProbe::~BandwidthProbe() {
  if (buf_ != nullptr) ::munmap(buf_, bytes_);
}

double BandwidthProbe::sample() {
  if (buf_ == nullptr) return 0;
  const bool avx2 = isa_supported(IsaLevel::kAvx2);
  const int threads = pool_.num_threads();
  const int64_t n = static_cast<int64_t>(bytes_ / sizeof(float));
  return rates(pool_, 1,
               [&](int64_t t) {
                 const int64_t b = n * t / threads / 32 * 32;
                 const int64_t e = n * (t + 1) / threads / 32 * 32;
                 float* sink = &sinks_[static_cast<size_t>(t) * 16];
                 return avx2 ? peaks_detail::read_sum_avx2(buf_ + b, e - b, sink)
                             : read_sum_scalar(buf_ + b, e - b, sink);
               })[0] /
         1e9;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void sample_read_bandwidth(ThreadPool& pool, int samples, MachinePeaks* m) {
  // 512 MiB: far past any last-level cache, so every read comes from memory. Mapped on its
  // own and unmapped after, so that the probe leaves nothing resident behind.
  BandwidthProbe probe(pool, (size_t{512} << 20) / kProbeShrink);
  if (!probe.ok()) return;
  for (int i = 0; i < samples; ++i) m->bandwidth_samples.push_back(probe.sample());
  m->bandwidth_gbs = median_of(m->bandwidth_samples);
}

MachinePeaks measure_machine_peaks(ThreadPool& pool) {
  MachinePeaks m;
  const bool avx2 = isa_supported(IsaLevel::kAvx2);
  const int threads = pool.num_threads();
  sample_read_bandwidth(pool, 3, &m);
  std::vector<float> sinks(static_cast<size_t>(threads) * 16, 0.0f);
  // The widest arithmetic the selected kernels use: AVX-512 where they run at that level.
  const bool avx512 = active_isa() >= IsaLevel::kAvx512;
  if (avx2) {
    m.fp32_gflops =
        best_rate(pool, 3,
                  [&](int64_t t) {
                    float* sink = &sinks[static_cast<size_t>(t) * 16];
                    return avx512 ? peaks_detail::fp32_fma_avx512(20'000'000 / kProbeShrink, sink)
                                  : peaks_detail::fp32_fma_avx2(20'000'000 / kProbeShrink, sink);
                  }) /
        1e9;
    std::vector<int> isinks(static_cast<size_t>(threads) * 16, 0);
    const bool amx = active_isa() >= IsaLevel::kAmx;
    m.int8_gops =
        best_rate(pool, 3,
                  [&](int64_t t) {
                    int* sink = &isinks[static_cast<size_t>(t) * 16];
                    if (amx) return peaks_detail::int8_dot_amx(1'000'000 / kProbeShrink, sink);
                    return avx512 ? peaks_detail::int8_dot_avx512(20'000'000 / kProbeShrink, sink)
                                  : peaks_detail::int8_dot_avx2(20'000'000 / kProbeShrink, sink);
                  }) /
        1e9;
    if (!avx512) {
      m.int16_gops =
          best_rate(pool, 3,
                    [&](int64_t t) {
                      return peaks_detail::int16_dot_avx2(20'000'000 / kProbeShrink,
                                                          &isinks[static_cast<size_t>(t) * 16]);
                    }) /
          1e9;
    }
    // The BF16 kernels widen BF16 to FP32 and use FP32 FMAs (vdpbf16ps would round the
    // activations to BF16 too): the FP32 peak bounds them.
    m.bf16_gflops = m.fp32_gflops;
    m.bf16_how = avx512 ? "avx512 fp32 fma on widened bf16" : "fp32 fma on widened bf16";
    m.int8_how = amx ? "amx tdpbssd" : avx512 ? "avx512 vnni vpdpbusd" : "avx2 vpmaddubsw + vpaddw";
  } else {
    m.bf16_how = m.int8_how = "not measured without AVX2";
  }
  return m;
}

}  // namespace mx
