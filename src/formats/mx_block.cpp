#include "formats/mx_block.h"

#include <algorithm>
#include <cmath>

#include "formats/half.h"

namespace mx {

std::string_view scale_rule_name(ScaleRule rule) {
  return rule == ScaleRule::kFloor ? "floor" : "rceil";
}

bool parse_scale_rule(std::string_view text, ScaleRule* out) {
  if (text == "floor") {
    *out = ScaleRule::kFloor;
  } else if (text == "rceil") {
    *out = ScaleRule::kRceil;
  } else {
    return false;
  }
  return true;
}

uint8_t mx_scale_byte(float amax, ElemFormat format, ScaleRule rule) {
  if (!std::isfinite(amax)) return kE8M0Nan;
  if (amax == 0.0f) return 0;
  const ElemFormatInfo& f = elem_info(format);
  int e2;
  std::frexp(static_cast<double>(amax), &e2);  // exact, FP32 subnormals included
  int e = (e2 - 1) - f.emax;
  if (rule == ScaleRule::kRceil) {
    // floor(log2 amax) - emax is one too small exactly when amax's mantissa exceeds max's.
    if (static_cast<double>(amax) > std::ldexp(static_cast<double>(f.max), e)) ++e;
  }
  e = std::clamp(e, -127, 127);
  return e8m0_from_exponent(e);
}

void mx_quantize_block(const float* x, int n, ElemFormat format, ScaleRule rule, uint8_t* codes,
                       uint8_t* scale) {
  float amax = 0.0f;
  bool finite = true;
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) finite = false;
    amax = std::max(amax, std::fabs(x[i]));
  }
  const uint8_t byte = finite ? mx_scale_byte(amax, format, rule) : kE8M0Nan;
  *scale = byte;
  if (byte == kE8M0Nan) {
    // The whole block is unusable: NaN elements where the format has them.
    const uint8_t nan = elem_info(format).nan_code;
    for (int i = 0; i < n; ++i) codes[i] = nan;
    return;
  }
  const int e = e8m0_exponent(byte);
  for (int i = 0; i < n; ++i) {
    // x / 2^e is exact in double over the whole FP32 range.
    codes[i] = elem_encode(format, std::ldexp(static_cast<double>(x[i]), -e));
  }
}

void mx_quantize_row(const float* x, int64_t k, ElemFormat format, ScaleRule rule, uint8_t* codes,
                     uint8_t* scales) {
  for (int64_t b = 0; b * kMxBlock < k; ++b) {
    const int n = static_cast<int>(std::min<int64_t>(kMxBlock, k - b * kMxBlock));
    mx_quantize_block(x + b * kMxBlock, n, format, rule, codes + b * kMxBlock, scales + b);
  }
}

void mx_dequantize_row(const uint8_t* codes, const uint8_t* scales, int64_t k, ElemFormat format,
                       float* out) {
  for (int64_t i = 0; i < k; ++i) {
    const uint8_t s = scales[i / kMxBlock];
    if (s == kE8M0Nan) {
      out[i] = NAN;
      continue;
    }
    // decode(code) * 2^e is exact in double; one rounding to FP32.
    out[i] = static_cast<float>(
        std::ldexp(static_cast<double>(elem_decode(format, codes[i])), e8m0_exponent(s)));
  }
}

void mxfp4_dual_quantize_row(const float* x, int64_t k, uint8_t* codes, uint8_t* scales,
                             float* s0) {
  float t[kMxDualChunk];
  for (int64_t c = 0; c * kMxDualChunk < k; ++c) {
    const int64_t base = c * kMxDualChunk;
    const int n = static_cast<int>(std::min<int64_t>(kMxDualChunk, k - base));
    float amax = 0.0f;
    for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[base + i]));
    const float s = amax / 6.0f;
    s0[c] = s;
    for (int i = 0; i < n; ++i) t[i] = s == 0.0f ? 0.0f : round_to_bf16(x[base + i] / s);
    mx_quantize_row(t, n, ElemFormat::kE2M1, ScaleRule::kFloor, codes + base,
                    scales + base / kMxBlock);
  }
}

void mxfp4_dual_dequantize_row(const uint8_t* codes, const uint8_t* scales, const float* s0,
                               int64_t k, float* out) {
  mx_dequantize_row(codes, scales, k, ElemFormat::kE2M1, out);
  for (int64_t i = 0; i < k; ++i) out[i] *= s0[i / kMxDualChunk];
}

}  // namespace mx
