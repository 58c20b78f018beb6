// Pillow's bicubic resize, reimplemented from its documented algorithm so that the resized
// pixels, and so the vision tower's input, equal what transformers' PIL path produces.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/check.h"
#include "media/vision_preprocess.h"

namespace mx {
namespace {

// 32 bits less 8 for the sample and 2 for the sign and the sum's headroom.
constexpr int kPrecisionBits = 32 - 8 - 2;

// Keys' cubic convolution kernel with a = -0.5, support 2.
double bicubic_kernel(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// For each output index, the first input index and the fixed-point weights of its taps.
struct ResampleTaps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;  // out_size * max_taps
  int max_taps = 0;
};

ResampleTaps bicubic_taps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  // Shrinking widens the kernel by the scale (antialiasing); enlarging keeps it.
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  // Multiplied by the reciprocal, not divided: the last bit of a weight can decide its
  // fixed-point rounding.
  const double inv_filter_scale = 1.0 / filter_scale;
  ResampleTaps t;
  t.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size) * t.max_taps, 0);
  std::vector<double> w(t.max_taps);
  for (int i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // Truncation toward zero, as the C cast Pillow uses; negatives clip to 0 below anyway.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int n = std::min(hi - lo, t.max_taps);
    double sum = 0.0;
    for (int k = 0; k < n; ++k) {
      w[k] = bicubic_kernel((k + lo - center + 0.5) * inv_filter_scale);
      sum += w[k];
    }
    int32_t* out = &t.weights[static_cast<size_t>(i) * t.max_taps];
    for (int k = 0; k < n; ++k) {
      const double v = (sum != 0.0 ? w[k] / sum : w[k]) * (1 << kPrecisionBits);
      out[k] = static_cast<int32_t>(v < 0 ? v - 0.5 : v + 0.5);  // half away from zero
    }
    t.first[i] = lo;
    t.count[i] = std::max(n, 0);
  }
  return t;
}

uint8_t round_clip8(int64_t acc) {
  const int64_t v = (acc + (int64_t{1} << (kPrecisionBits - 1))) >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

Image resample_horizontal(const Image& in, int out_w) {
  const ResampleTaps t = bicubic_taps(in.width, out_w);
  Image out{out_w, in.height, std::vector<uint8_t>(size_t{3} * out_w * in.height)};
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* src = &in.rgb[size_t{3} * in.width * y];
    uint8_t* dst = &out.rgb[size_t{3} * out_w * y];
    for (int x = 0; x < out_w; ++x) {
      const int32_t* w = &t.weights[static_cast<size_t>(x) * t.max_taps];
      const uint8_t* s = src + size_t{3} * t.first[x];
      int64_t acc[3] = {0, 0, 0};
      for (int k = 0; k < t.count[x]; ++k) {
        for (int c = 0; c < 3; ++c) acc[c] += int64_t{s[3 * k + c]} * w[k];
      }
      for (int c = 0; c < 3; ++c) dst[3 * x + c] = round_clip8(acc[c]);
    }
  }
  return out;
}

Image resample_vertical(const Image& in, int out_h) {
  const ResampleTaps t = bicubic_taps(in.height, out_h);
  const size_t row = size_t{3} * in.width;
  Image out{in.width, out_h, std::vector<uint8_t>(row * out_h)};
  std::vector<int64_t> acc(row);
  for (int y = 0; y < out_h; ++y) {
    std::fill(acc.begin(), acc.end(), 0);
    const int32_t* w = &t.weights[static_cast<size_t>(y) * t.max_taps];
    for (int k = 0; k < t.count[y]; ++k) {
      const uint8_t* s = &in.rgb[row * (t.first[y] + k)];
      for (size_t i = 0; i < row; ++i) acc[i] += int64_t{s[i]} * w[k];
    }
    uint8_t* dst = &out.rgb[row * y];
    for (size_t i = 0; i < row; ++i) dst[i] = round_clip8(acc[i]);
  }
  return out;
}

}  // namespace

Image resize_bicubic_pillow(const Image& in, int out_w, int out_h) {
  MX_CHECK(out_w >= 1 && out_h >= 1 && in.width >= 1 && in.height >= 1);
  MX_CHECK(in.rgb.size() == size_t{3} * in.width * in.height);
  if (out_w == in.width && out_h == in.height) return in;
  if (out_w == in.width) return resample_vertical(in, out_h);
  Image horizontal = resample_horizontal(in, out_w);
  if (out_h == in.height) return horizontal;
  return resample_vertical(horizontal, out_h);
}

}  // namespace mx
