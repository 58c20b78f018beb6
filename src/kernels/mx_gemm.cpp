#include "kernels/mx_gemm.h"

#include <bit>
#include <cstring>

namespace mx {
namespace {

inline float pow2(int e) {
  // 2^e for e in [-149, 127] as an exact float.
  if (e >= -126) return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23);
  return std::bit_cast<float>(1u << (e + 149));
}

// Codes of one block (n <= 32 elements starting at element `first`) to floats, unscaled.
inline void decode_block(ElemFormat f, const uint8_t* row, int64_t first, int n, const float* lut,
                         float* out) {
  if (f == ElemFormat::kE2M1) {
    for (int j = 0; j < n; ++j) {
      const int64_t e = first + j;
      out[j] = lut[(row[e >> 1] >> ((e & 1) * 4)) & 0xF];
    }
  } else {
    for (int j = 0; j < n; ++j) out[j] = lut[row[first + j]];
  }
}

const float* lut_of(ElemFormat f) {
  switch (f) {
    case ElemFormat::kE4M3:
      return e4m3_table();
    case ElemFormat::kE5M2:
      return e5m2_table();
    case ElemFormat::kE2M1:
      return e2m1_table();
  }
  return e4m3_table();
}

}  // namespace

int64_t mx_decoded_stride(int64_t k) { return (k + 31) / 32 * 32; }

void mx_decode_activations(const MxMatrixView& a, float* af) {
  const int64_t k = a.k, nb = (k + 31) / 32, kp = nb * 32;
  const float* lut = lut_of(a.format);
  for (int64_t i = 0; i < a.rows; ++i) {
    const uint8_t* row = a.codes + i * a.row_bytes;
    float* dst = af + i * kp;
    for (int64_t b = 0; b < nb; ++b) {
      const int n = static_cast<int>(k - b * 32 < 32 ? k - b * 32 : 32);
      decode_block(a.format, row, b * 32, n, lut, dst + b * 32);
      const float s = pow2(static_cast<int>(a.scales[i * nb + b]) - 127);
      for (int j = 0; j < n; ++j) dst[b * 32 + j] *= s;
      for (int j = n; j < 32; ++j) dst[b * 32 + j] = 0.0f;
    }
  }
}

namespace mx_gemm_detail {
namespace {
void mx_gemm_scalar(const float* af, const float* a_chunk_scales, int64_t m, const MxMatrixView& w,
                    float* y, int64_t ldy, int64_t n_begin, int64_t n_end, float* acc) {
  const int64_t k = w.k, nb = (k + 31) / 32, kp = nb * 32;
  const bool dual = w.chunk_scales != nullptr;
  float* chunk_acc = acc + m;
  const float* wlut = lut_of(w.format);
  const int64_t chunks = (k + 511) / 512;
  alignas(64) float wb[32];
  for (int64_t n = n_begin; n < n_end; ++n) {
    const uint8_t* wrow = w.codes + n * w.row_bytes;
    const uint8_t* wsc = w.scales + n * nb;
    for (int64_t i = 0; i < m; ++i) acc[i] = 0.0f;
    for (int64_t c = 0; c < (dual ? chunks : 1); ++c) {
      const int64_t b0 = dual ? c * 16 : 0;
      const int64_t b1 = dual ? (b0 + 16 < nb ? b0 + 16 : nb) : nb;
      for (int64_t i = 0; i < m; ++i) chunk_acc[i] = 0.0f;
      for (int64_t b = b0; b < b1; ++b) {
        const int cnt = static_cast<int>(k - b * 32 < 32 ? k - b * 32 : 32);
        decode_block(w.format, wrow, b * 32, cnt, wlut, wb);
        for (int j = cnt; j < 32; ++j) wb[j] = 0.0f;
        const float ws = pow2(static_cast<int>(wsc[b]) - 127);
        for (int64_t i = 0; i < m; ++i) {
          const float* ar = af + i * kp + b * 32;
          // Eight fixed lanes: a reduction order the compiler may vectorize.
          float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          for (int j = 0; j < 32; j += 8) {
            for (int l = 0; l < 8; ++l) lane[l] += ar[j + l] * wb[j + l];
          }
          const float s = ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
                          ((lane[2] + lane[6]) + (lane[3] + lane[7]));
          chunk_acc[i] += s * ws;
        }
      }
      if (dual) {
        const float w0 = w.chunk_scales[n * chunks + c];
        for (int64_t i = 0; i < m; ++i)
          acc[i] += chunk_acc[i] * (a_chunk_scales[i * chunks + c] * w0);
      } else {
        for (int64_t i = 0; i < m; ++i) acc[i] = chunk_acc[i];
      }
    }
    for (int64_t i = 0; i < m; ++i) y[i * ldy + n] = acc[i];
  }
}

}  // namespace
const MxGemmKernels kScalarMxGemm = {IsaLevel::kScalar, mx_gemm_scalar};
}  // namespace mx_gemm_detail

const MxGemmKernels* mx_gemm_kernels_for(IsaLevel level) {
  if (!isa_supported(level)) return nullptr;
  switch (level) {
    case IsaLevel::kScalar:
      return &mx_gemm_detail::kScalarMxGemm;
    case IsaLevel::kAvx2:
      return &mx_gemm_detail::kAvx2MxGemm;
    case IsaLevel::kAvx512:
      return nullptr;  // the AVX2 kernel serves until one is written
  }
  return nullptr;
}

const MxGemmKernels& mx_gemm_kernels() {
  static const MxGemmKernels* k = [] {
    for (int l = static_cast<int>(active_isa()); l >= 0; --l) {
      if (const MxGemmKernels* p = mx_gemm_kernels_for(static_cast<IsaLevel>(l))) return p;
    }
    return &mx_gemm_detail::kScalarMxGemm;
  }();
  return *k;
}

}  // namespace mx
