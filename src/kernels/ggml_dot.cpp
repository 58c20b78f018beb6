// The dot-product types of ggml's weight types, the scalar references of the activation
// quantizers and of the integer GEMM (ggml_dot.h), and the per-ISA dispatch.
#include "kernels/ggml_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/isa_table.h"
#include "formats/half.h"

namespace mx {

bool ggml_has_int_dot(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kIQ4_NL:
    case GgmlType::kIQ4_XS:
    case GgmlType::kMXFP4:
      return true;
    default:
      return false;
  }
}

GgmlActType ggml_act_type(GgmlType t) {
  return ggml_type_info(t).block == kGgmlQK_K ? GgmlActType::kQ8_K : GgmlActType::kQ8_0;
}

int64_t ggml_act_block(GgmlActType a) { return a == GgmlActType::kQ8_K ? kGgmlQK_K : kGgmlQK; }

int64_t ggml_act_row_bytes(GgmlActType a, int64_t k) {
  const int64_t bytes = a == GgmlActType::kQ8_0 ? k + 8 * (k / 32) : k + 4 * (k / 256) + k / 8;
  return (bytes + 63) / 64 * 64;
}

namespace ggml_dot_detail {
namespace {

void quantize_q8_0(const float* x, int64_t k, uint8_t* row) {
  auto* codes = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + k);
  float* s = d + k / 32;
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = static_cast<int>(std::nearbyint(xb[j] * id));
      codes[32 * b + j] = static_cast<int8_t>(q);
      sum += q;
    }
    d[b] = fp16_to_float(float_to_fp16(amax / 127.0f));
    s[b] = d[b] * static_cast<float>(sum);
  }
}

void quantize_q8_k(const float* x, int64_t k, uint8_t* row) {
  auto* codes = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + k);
  auto* sums = reinterpret_cast<int16_t*>(d + k / 256);
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + 256 * b;
    float hi = 0.0f, lo = 0.0f;
    for (int j = 0; j < 256; ++j) {
      hi = std::max(hi, xb[j]);
      lo = std::min(lo, xb[j]);
    }
    const float v = hi >= -lo ? hi : lo;
    const float iscale = v != 0.0f ? -127.0f / v : 0.0f;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 16 * g; j < 16 * g + 16; ++j) {
        const int q = std::min(127, static_cast<int>(std::nearbyint(iscale * xb[j])));
        codes[256 * b + j] = static_cast<int8_t>(q);
        sum += q;
      }
      sums[16 * b + g] = static_cast<int16_t>(sum);
    }
    d[b] = v != 0.0f ? 1.0f / iscale : 0.0f;
  }
}

void quantize_reference(GgmlActType a, const float* x, int64_t k, uint8_t* row) {
  if (a == GgmlActType::kQ8_0) {
    quantize_q8_0(x, k, row);
  } else {
    quantize_q8_k(x, k, row);
  }
}

// Each weight block dequantized by the type's reference, each activation block as d * code,
// products summed in double.
void gemm_reference(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end) {
  const GgmlTypeInfo& info = ggml_type_info(a.type);
  const GgmlActType at = ggml_act_type(a.type);
  const int64_t ab = ggml_act_block(at), wb = info.block;
  float wv[kGgmlQK_K];
  for (int64_t n = n_begin; n < n_end; ++n) {
    for (int64_t i = 0; i < a.m; ++i) {
      const ActRowView x = act_row_view(at, a.xq + i * a.xq_stride, a.k);
      double sum = 0.0;
      for (int64_t b = 0; b < a.k / wb; ++b) {
        info.reference(a.w + n * a.row_bytes + b * info.block_bytes, wv, wb);
        for (int64_t j = 0; j < wb; ++j) {
          const int64_t idx = b * wb + j;
          sum += static_cast<double>(wv[j]) * x.d[idx / ab] * x.codes[idx];
        }
      }
      a.y[i * a.ldy + n] = static_cast<float>(sum);
    }
  }
}

}  // namespace

int no_panels(GgmlType) { return 0; }

const GgmlDotKernels kScalarGgmlDot = {IsaLevel::kScalar, quantize_reference, gemm_reference,
                                       no_panels, nullptr};

}  // namespace ggml_dot_detail

int64_t ggml_panel_bytes(GgmlType t, int panel, int64_t n, int64_t k) {
  return (n + panel - 1) / panel * panel * ggml_row_bytes(t, k);
}

namespace {
constexpr IsaTable<GgmlDotKernels> kGgmlDotKernelsTable{&ggml_dot_detail::kScalarGgmlDot,
                                                        &ggml_dot_detail::kAvx2GgmlDot,
                                                        &ggml_dot_detail::kAvx512GgmlDot};
}  // namespace

const GgmlDotKernels* ggml_dot_kernels_for(IsaLevel level) {
  return kGgmlDotKernelsTable.at(level);
}

const GgmlDotKernels& ggml_dot_kernels() {
  static const GgmlDotKernels& k = kGgmlDotKernelsTable.select();
  return k;
}

}  // namespace mx
