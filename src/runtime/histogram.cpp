#include "runtime/histogram.h"

#include <algorithm>
#include <cstdio>

namespace mx {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

std::vector<double> Histogram::default_latency_bounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
          0.5,   1.0,    2.5,   5.0,  10.0,  20.0, 40.0, 60.0};
}

void Histogram::observe(double v) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  ++counts_[static_cast<size_t>(it - bounds_.begin())];
  ++count_;
  sum_ += v;
}

std::vector<int64_t> Histogram::cumulative() const {
  std::vector<int64_t> out(counts_.size());
  int64_t run = 0;
  for (size_t i = 0; i < counts_.size(); ++i) out[i] = run += counts_[i];
  return out;
}

std::string Histogram::exposition(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  const std::vector<int64_t> cum = cumulative();
  char buf[64];
  for (size_t i = 0; i < bounds_.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%g", bounds_[i]);
    out += name + "_bucket{le=\"" + buf + "\"} " + std::to_string(cum[i]) + "\n";
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum.back()) + "\n";
  std::snprintf(buf, sizeof buf, "%.9g", sum_);
  out += name + "_sum " + buf + "\n" + name + "_count " + std::to_string(count_) + "\n";
  return out;
}

}  // namespace mx
