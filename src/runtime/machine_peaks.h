// What this machine can do at most, measured in the same run as the benchmark it scales:
// memory read bandwidth (a buffer far larger than the caches, every thread reading its
// slice) and peak arithmetic with the widest instructions the CPU has for FP32 FMA, BF16
// products and int8 dot products (AMX tiles where the integer GEMMs run on them), all threads
// busy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace mx {

struct MachinePeaks {
  // The median of the read-bandwidth samples: on a shared machine the rate swings by half
  // within minutes, and the best of a few samples overstates what a run can count on.
  double bandwidth_gbs = 0;
  std::vector<double> bandwidth_samples;  // GB/s, in the order taken
  double fp32_gflops = 0;
  double bf16_gflops = 0;  // BF16 products accumulated in FP32
  double int8_gops = 0;    // int8 multiply-adds, two ops each
  // int16 multiply-adds (two ops each) on AVX2, the W4A8 kernels' arithmetic at several rows
  // there; 0 where the kernels run at a wider level (their W4A8 is on int8 dot products).
  double int16_gops = 0;
  std::string bf16_how, int8_how;
};

MachinePeaks measure_machine_peaks(ThreadPool& pool);
// `n` more read-bandwidth samples into m, with bandwidth_gbs their median with the earlier
// ones: a benchmark takes some after its timed part too, so that the figure spans the run.
void sample_read_bandwidth(ThreadPool& pool, int n, MachinePeaks* m);

// A buffer far past the last-level cache, on huge pages and resident while the probe lives,
// for read-bandwidth samples taken between the steps of a benchmark: a neighbour's traffic
// moves this machine's bandwidth by half within seconds, and a sample next to the steps it
// scales sees what they saw.
class BandwidthProbe {
 public:
  BandwidthProbe(ThreadPool& pool, size_t bytes);
  ~BandwidthProbe();
  BandwidthProbe(const BandwidthProbe&) = delete;
  BandwidthProbe& operator=(const BandwidthProbe&) = delete;
  bool ok() const { return buf_ != nullptr; }
  size_t bytes() const { return bytes_; }
  // One read of the whole buffer by every thread at once, in GB/s; 0 when not ok().
  double sample();

 private:
  ThreadPool& pool_;
  size_t bytes_;
  float* buf_ = nullptr;
  std::vector<float> sinks_;
};

double median_of(std::vector<double> v);

// Under the sanitizers every load is checked and a probe's figures mean nothing: probe buffers
// and loops shrink by this much there, so that a test's bench run takes seconds.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr int64_t kProbeShrink = 16;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr int64_t kProbeShrink = 16;
#else
inline constexpr int64_t kProbeShrink = 1;
#endif
#else
inline constexpr int64_t kProbeShrink = 1;
#endif

namespace peaks_detail {
// AVX2 loops (machine_peaks_avx2.cpp); each returns its operation count.
double read_sum_avx2(const float* p, int64_t n, float* sink);
double fp32_fma_avx2(int64_t iters, float* sink);
double int16_dot_avx2(int64_t iters, int* sink);
double int8_dot_avx2(int64_t iters, int* sink);
// AVX-512 loops (machine_peaks_avx512.cpp), run where the kernels run at that level.
double fp32_fma_avx512(int64_t iters, float* sink);
double int8_dot_avx512(int64_t iters, int* sink);
// AMX (machine_peaks_amx.cpp), run where the kernels run at that level.
double int8_dot_amx(int64_t iters, int* sink);
}  // namespace peaks_detail

}  // namespace mx
