// AVX2 preparation of the MX GEMMs' activations (mx_gemm.h): E4M3 rows decoded to FP32 for
// the FP32 path, and W4A8's 14-bit fixed point with the byte planes of its one-row kernel.
// The AVX-512 table shares both.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/mx_gemm.h"

namespace mx::mx_gemm_detail {
namespace {

// Eight E4M3 codes as their exact FP32 values: the code's bits in an FP32 pattern read as the
// value times 2^-120 (subnormal codes as FP32 subnormals); NaN codes (0x7F, 0xFF) read NaN,
// as the decode table has them.
inline __m256 e4m3_values(const uint8_t* p) {
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i low = _mm256_and_si256(b, _mm256_set1_epi32(0x7F));
  const __m256i bits =
      _mm256_or_si256(_mm256_slli_epi32(low, 20),
                      _mm256_slli_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x80)), 24));
  const __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
  const __m256 nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(low, _mm256_set1_epi32(0x7F)));
  return _mm256_or_ps(v,
                      _mm256_and_ps(nan, _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN())));
}

// A block's scale as mx_decode_activations computes it: 2^(s - 127) times the factor.
inline float block_scale(uint8_t s, float factor) {
  return std::ldexp(1.0f, static_cast<int>(s) - 127) * factor;
}

// x = 170 h + l for sixteen fixed-point values: h = floor((x + 85) / 170), taken as
// floor(y * 49345 / 2^23) - 85 for y = x + 85 + 170 * 85 in [0, 2^15), exact there.
__attribute__((always_inline)) inline void split16(__m256i x, __m256i& h, __m256i& l) {
  const __m256i y = _mm256_add_epi16(x, _mm256_set1_epi16(85 + kW4a8PlaneSplit * 85));
  const __m256i q =
      _mm256_srli_epi16(_mm256_mulhi_epu16(y, _mm256_set1_epi16(static_cast<int16_t>(49345))), 7);
  h = _mm256_sub_epi16(q, _mm256_set1_epi16(85));
  l = _mm256_sub_epi16(x, _mm256_mullo_epi16(h, _mm256_set1_epi16(kW4a8PlaneSplit)));
}

// One block of W4a8Bytes's planes from its 32 fixed-point values in k order; returns their
// sum.
int32_t split_block(const __m256i (&x)[2], int8_t* dst) {
  __m256i h[2], l[2];
  split16(x[0], h[0], l[0]);
  split16(x[1], h[1], l[1]);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                      _mm256_permute4x64_epi64(_mm256_packs_epi16(h[0], h[1]), 0xD8));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 32),
                      _mm256_permute4x64_epi64(_mm256_packs_epi16(l[0], l[1]), 0xD8));
  const __m256i one = _mm256_set1_epi16(1);
  const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(x[0], one), _mm256_madd_epi16(x[1], one));
  const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, _MM_SHUFFLE(2, 3, 0, 1))));
}

// Sixteen E4M3 codes as mx_w4a8_activation_int's values: times 32 rounded to nearest even
// (vcvtps2dq's default, as nearbyint), NaN codes 0.
__m256i fixed16(const uint8_t* p) {
  const __m256 unit = _mm256_set1_ps(static_cast<float>(1 << kMxW4a8FracBits));
  __m256i v[2];
  for (int h = 0; h < 2; ++h) {
    const __m256 x = e4m3_values(p + 8 * h);
    const __m256 finite = _mm256_cmp_ps(x, x, _CMP_ORD_Q);
    v[h] = _mm256_cvtps_epi32(_mm256_and_ps(_mm256_mul_ps(x, unit), finite));
  }
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(v[0], v[1]), 0xD8);
}

}  // namespace

// Whole single-level E4M3 blocks eight codes at a time; everything else (other formats,
// dual-level chunks, a row's partial last block) as the scalar decode does it.
void decode_avx2(const MxMatrixView& a, float* af, float factor) {
  if (a.format != ElemFormat::kE4M3 || a.chunk_scales != nullptr || a.k % 32 != 0) {
    mx_decode_activations(a, af, factor);
    return;
  }
  const int64_t nb = a.k / 32, kp = mx_decoded_stride(a.k);
  for (int64_t i = 0; i < a.rows; ++i) {
    const uint8_t* row = a.codes + i * a.row_bytes;
    float* dst = af + i * kp;
    for (int64_t b = 0; b < nb; ++b) {
      const __m256 s = _mm256_set1_ps(block_scale(a.scales[i * nb + b], factor));
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) {
        _mm256_storeu_ps(dst + b * 32 + 8 * q, _mm256_mul_ps(e4m3_values(row + b * 32 + 8 * q), s));
      }
    }
  }
}

// mx_prepare_fp8_activations_i16's values (whole blocks sixteen codes at a time, a row's
// partial last block from the codes one by one, zero past k), stored in its order k0, k2, k1,
// k3 within each four for W4a8Words and split into W4a8Bytes's planes with their sums.
void prepare_w4a8_avx2(const MxMatrixView& a, int16_t* q, int8_t* planes, int32_t* sums,
                       float* scales) {
  const int64_t nb = (a.k + 31) / 32, kp = mx_decoded_stride(a.k);
  const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15, 0, 1,
                                         4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15);
  for (int64_t i = 0; i < a.rows; ++i) {
    const uint8_t* row = a.codes + i * a.row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      alignas(32) int16_t part[32] = {};
      __m256i x[2];
      if (32 * (b + 1) <= a.k && a.format == ElemFormat::kE4M3) {
        x[0] = fixed16(row + 32 * b);
        x[1] = fixed16(row + 32 * b + 16);
      } else {
        for (int64_t t = 0; t < 32 && 32 * b + t < a.k; ++t)
          part[t] = mx_w4a8_activation_int(row[32 * b + t]);
        x[0] = _mm256_load_si256(reinterpret_cast<const __m256i*>(part));
        x[1] = _mm256_load_si256(reinterpret_cast<const __m256i*>(part + 16));
      }
      int16_t* dst = q + i * kp + 32 * b;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_shuffle_epi8(x[0], order));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16), _mm256_shuffle_epi8(x[1], order));
      sums[i * nb + b] = split_block(x, planes + i * 2 * kp + 64 * b);
      scales[i * nb + b] = std::ldexp(1.0f, static_cast<int>(a.scales[i * nb + b]) - 127 - 14);
    }
  }
}

}  // namespace mx::mx_gemm_detail
