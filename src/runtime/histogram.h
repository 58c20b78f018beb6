// A latency histogram with fixed upper bounds, as Prometheus histograms count them: each
// bucket counts observations at or below its bound, and +Inf counts all of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mx {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds = default_latency_bounds());
  void observe(double v);
  // Bucket i counts observations <= bounds()[i]; the last entry counts all (+Inf).
  std::vector<int64_t> cumulative() const;
  const std::vector<double>& bounds() const { return bounds_; }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  // Prometheus text exposition of this histogram under `name`.
  std::string exposition(const std::string& name, const std::string& help) const;

  // Seconds from 1 ms to 60 s, roughly three per decade.
  static std::vector<double> default_latency_bounds();

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; one extra for +Inf
  int64_t count_ = 0;
  double sum_ = 0;
};

}  // namespace mx
