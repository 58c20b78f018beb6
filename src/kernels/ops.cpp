#include "kernels/ops.h"

#include <bit>
#include <cmath>

#include "kernels/glu.h"

namespace mx {

namespace {
inline float bf16f(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// The sum of squares in double (each square exact), in eight interleaved partial sums (element
// i into sum i % 8) added as a fixed tree: the same order on every ISA, and eight independent
// chains: one chain of dependent adds took 2.2-2.9 us for 2048 values, these 0.3-0.6 us.
double sum_squares(const float* x, int64_t n) {
  double s[8] = {};
  const int64_t n8 = n / 8 * 8;
  for (int64_t i = 0; i < n8; i += 8) {
    for (int j = 0; j < 8; ++j) s[j] += static_cast<double>(x[i + j]) * x[i + j];
  }
  for (int64_t i = n8; i < n; ++i) s[i - n8] += static_cast<double>(x[i]) * x[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
}  // namespace

void rms_norm_bf16(const float* x, const uint16_t* w, int64_t n, double eps, float* y,
                   bool gemma_offset) {
  const double ss = sum_squares(x, n);
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) {
    const float g = gemma_offset ? 1.0f + bf16f(w[i]) : bf16f(w[i]);
    y[i] = x[i] * inv * g;
  }
}

void rms_norm(const float* x, const float* w, int64_t n, double eps, float* y, bool gemma_offset) {
  const double ss = sum_squares(x, n);
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) {
    const float g = gemma_offset ? 1.0f + w[i] : w[i];
    y[i] = x[i] * inv * g;
  }
}

void rope_inv_freq(int64_t head_dim, double theta, float* inv_freq) {
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = static_cast<float>(
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim)));
  }
}

void rope_neox(float* head, int64_t head_dim, int64_t pos, const float* inv_freq) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // The angle in FP32 as the reference computes it (position times inverse frequency).
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = head[i], b = head[i + half];
    head[i] = a * c - b * s;
    head[i + half] = b * c + a * s;
  }
}

void rope_cos_sin(int64_t head_dim, int64_t pos, const float* inv_freq, float* cos, float* sin) {
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    cos[i] = std::cos(angle);
    sin[i] = std::sin(angle);
  }
}

void layer_norm(const float* x, const float* w, const float* b, int64_t n, double eps, float* y) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / static_cast<double>(n);
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<float>((x[i] - mean) * inv) * w[i] + b[i];
  }
}

void gelu_tanh(float* x, int64_t n) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  }
}

void gelu_erf(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
  }
}

void rope_cos_sin_mrope(int64_t head_dim, const int64_t pos[3], const int64_t section[3],
                        const float* inv_freq, float* cos, float* sin) {
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const int64_t axis = i % 3;
    const int64_t p = axis != 0 && i / 3 < section[axis] ? pos[axis] : pos[0];
    const float angle = static_cast<float>(p) * inv_freq[i];
    cos[i] = std::cos(angle);
    sin[i] = std::sin(angle);
  }
}

void rope_neox_cs(float* head, int64_t head_dim, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float a = head[i], b = head[i + half];
    head[i] = a * cos[i] - b * sin[i];
    head[i + half] = b * cos[i] + a * sin[i];
  }
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  glu_kernels().swiglu(gate, up, n, out);
}

void sigmoid_gate(const float* gate, int64_t n, float* x) {
  glu_kernels().sigmoid_gate(gate, n, x);
}

void softmax(float* x, int64_t n) {
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::fmax(mx, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void log_softmax(const float* logits, int64_t n, float* out) {
  float mx = logits[0];
  for (int64_t i = 1; i < n; ++i) mx = std::fmax(mx, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
}

}  // namespace mx
