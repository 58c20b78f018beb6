// AVX2 activation quantization. Compiled with AVX2 flags: no inline functions from shared
// headers here (see act_quant.h). Full 32-blocks with a normal, finite amax take the vector
// path; every other block goes to the reference block function.
#include <immintrin.h>

#include "formats/act_quant.h"

namespace mx::act_quant_detail {
namespace {

constexpr int kBlock = 32;
constexpr int kRuleRceil = 1;  // ScaleRule::kRceil

struct Elem {
  int emax;
  unsigned max_mantissa;  // FP32 mantissa bits of the format's max: decides the rceil step
};
constexpr Elem kE4M3 = {8, 0x600000u};  // 448 = 1.75 * 2^8
constexpr Elem kE2M1 = {2, 0x400000u};  // 6 = 1.5 * 2^2

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Loads one block. Returns false when it needs the reference (zero, FP32-subnormal, Inf or
// NaN amax); else sets the per-lane multiplier 2^-e and the E8M0 byte. The exponent stays in
// vector lanes so the element path never waits on a round trip through a general register.
template <typename T>
inline bool load_block(const T* x, const Elem& f, int rule, __m256 v[4], __m256* mult,
                       uint8_t* scale) {
  // Integer max of the magnitudes' bits: the same order as float max for non-negative
  // values, and NaN (bits above Inf) wins instead of being dropped as max_ps would.
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  v[0] = load8(x);
  v[1] = load8(x + 8);
  v[2] = load8(x + 16);
  v[3] = load8(x + 24);
  const __m256i m01 = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(v[0]), abs_mask),
                                       _mm256_and_si256(_mm256_castps_si256(v[1]), abs_mask));
  const __m256i m23 = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(v[2]), abs_mask),
                                       _mm256_and_si256(_mm256_castps_si256(v[3]), abs_mask));
  __m256i m = _mm256_max_epi32(m01, m23);
  m = _mm256_max_epi32(m, _mm256_permute2x128_si256(m, m, 1));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0x4E));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0xB1));
  __m256i e = _mm256_sub_epi32(_mm256_srli_epi32(m, 23), _mm256_set1_epi32(127 + f.emax));
  if (rule == kRuleRceil) {
    const __m256i above = _mm256_cmpgt_epi32(_mm256_and_si256(m, _mm256_set1_epi32(0x7FFFFF)),
                                             _mm256_set1_epi32(static_cast<int>(f.max_mantissa)));
    e = _mm256_sub_epi32(e, above);  // above is -1 where amax's mantissa exceeds max's
  }
  e = _mm256_max_epi32(e, _mm256_set1_epi32(-127));
  *mult = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127), e), 23));
  const unsigned bits = static_cast<unsigned>(_mm256_cvtsi256_si32(m));
  *scale = static_cast<uint8_t>(_mm256_cvtsi256_si32(e) + 127);
  return bits - 0x00800000u < 0x7F000000u;
}

// E4M3 code per lane (int32), round-to-nearest-even, saturating at 448.
inline __m256i to_e4m3(__m256 y) {
  const __m256i yi = _mm256_castps_si256(y);
  const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(yi, _mm256_set1_epi32(INT32_MIN)), 24);
  const __m256 a = _mm256_min_ps(
      _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))), _mm256_set1_ps(448.0f));
  const __m256i ai = _mm256_castps_si256(a);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(ai, 20), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(ai, _mm256_set1_epi32(0x7FFFF)), odd);
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(120 << 3));
  // Below 2^-6 the grid is 2^-9: adding 2^14 makes the FP32 adder round there.
  const __m256 t = _mm256_add_ps(a, _mm256_set1_ps(16384.0f));
  const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x46800000));
  const __m256 is_sub = _mm256_cmp_ps(a, _mm256_set1_ps(0x1p-6f), _CMP_LT_OQ);
  const __m256i code = _mm256_blendv_epi8(normal, sub, _mm256_castps_si256(is_sub));
  return _mm256_or_si256(code, sign);
}

// E2M1 code per lane (int32, 0..15), round-to-nearest-even, saturating at 6.
inline __m256i to_e2m1(__m256 y) {
  const __m256i yi = _mm256_castps_si256(y);
  const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(yi, _mm256_set1_epi32(INT32_MIN)), 28);
  const __m256 a = _mm256_min_ps(
      _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))), _mm256_set1_ps(6.0f));
  const __m256i ai = _mm256_castps_si256(a);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(ai, 22), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(ai, _mm256_set1_epi32(0x1FFFFF)), odd);
  const __m256i normal = _mm256_sub_epi32(_mm256_srli_epi32(r, 22), _mm256_set1_epi32(126 << 1));
  // Below 1 the grid is 0.5: adding 2^22 makes the FP32 adder round there.
  const __m256 t = _mm256_add_ps(a, _mm256_set1_ps(4194304.0f));
  const __m256i sub = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4A800000));
  const __m256 is_sub = _mm256_cmp_ps(a, _mm256_set1_ps(1.0f), _CMP_LT_OQ);
  const __m256i code = _mm256_blendv_epi8(normal, sub, _mm256_castps_si256(is_sub));
  return _mm256_or_si256(code, sign);
}

// 32 int32 codes (each 0..255) to 32 bytes in element order.
inline __m256i pack_bytes(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i p01 = _mm256_packus_epi32(c0, c1);
  const __m256i p23 = _mm256_packus_epi32(c2, c3);
  const __m256i p = _mm256_packus_epi16(p01, p23);
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <typename T>
void row_mxfp8(const T* x, int64_t k, ScaleRule rule, uint8_t* codes, uint8_t* scales) {
  const int64_t full = k / kBlock;
  for (int64_t b = 0; b < full; ++b) {
    const T* xb = x + b * kBlock;
    __m256 v[4], mult;
    uint8_t scale;
    if (!load_block(xb, kE4M3, static_cast<int>(rule), v, &mult, &scale)) {
      if constexpr (sizeof(T) == 4) {
        block_f32_to_mxfp8(reinterpret_cast<const float*>(xb), kBlock, rule, codes + b * kBlock,
                           scales + b);
      } else {
        block_bf16_to_mxfp8(reinterpret_cast<const uint16_t*>(xb), kBlock, rule, codes + b * kBlock,
                            scales + b);
      }
      continue;
    }
    scales[b] = scale;
    const __m256i out =
        pack_bytes(to_e4m3(_mm256_mul_ps(v[0], mult)), to_e4m3(_mm256_mul_ps(v[1], mult)),
                   to_e4m3(_mm256_mul_ps(v[2], mult)), to_e4m3(_mm256_mul_ps(v[3], mult)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + b * kBlock), out);
  }
  const int rest = static_cast<int>(k - full * kBlock);
  if (rest > 0) {
    if constexpr (sizeof(T) == 4) {
      block_f32_to_mxfp8(reinterpret_cast<const float*>(x + full * kBlock), rest, rule,
                         codes + full * kBlock, scales + full);
    } else {
      block_bf16_to_mxfp8(reinterpret_cast<const uint16_t*>(x + full * kBlock), rest, rule,
                          codes + full * kBlock, scales + full);
    }
  }
}

template <typename T>
void row_mxfp4(const T* x, int64_t k, ScaleRule rule, uint8_t* packed, uint8_t* scales) {
  const int64_t full = k / kBlock;
  for (int64_t b = 0; b < full; ++b) {
    const T* xb = x + b * kBlock;
    uint8_t* out = packed + b * (kBlock / 2);
    __m256 v[4], mult;
    uint8_t scale;
    if (!load_block(xb, kE2M1, static_cast<int>(rule), v, &mult, &scale)) {
      if constexpr (sizeof(T) == 4) {
        block_f32_to_mxfp4(reinterpret_cast<const float*>(xb), kBlock, rule, out, scales + b);
      } else {
        block_bf16_to_mxfp4(reinterpret_cast<const uint16_t*>(xb), kBlock, rule, out, scales + b);
      }
      continue;
    }
    scales[b] = scale;
    const __m256i bytes =
        pack_bytes(to_e2m1(_mm256_mul_ps(v[0], mult)), to_e2m1(_mm256_mul_ps(v[1], mult)),
                   to_e2m1(_mm256_mul_ps(v[2], mult)), to_e2m1(_mm256_mul_ps(v[3], mult)));
    // Each 16-bit lane holds (odd code << 8 | even code): fold to (odd << 4 | even).
    const __m256i nib =
        _mm256_or_si256(_mm256_and_si256(bytes, _mm256_set1_epi16(0x000F)),
                        _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi16(0x00F0)));
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(nib, nib), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(p));
  }
  const int rest = static_cast<int>(k - full * kBlock);
  if (rest > 0) {
    if constexpr (sizeof(T) == 4) {
      block_f32_to_mxfp4(reinterpret_cast<const float*>(x + full * kBlock), rest, rule,
                         packed + full * (kBlock / 2), scales + full);
    } else {
      block_bf16_to_mxfp4(reinterpret_cast<const uint16_t*>(x + full * kBlock), rest, rule,
                          packed + full * (kBlock / 2), scales + full);
    }
  }
}

}  // namespace

const ActQuantKernels kAvx2Kernels = {
    IsaLevel::kAvx2, row_mxfp8<float>, row_mxfp8<uint16_t>, row_mxfp4<float>, row_mxfp4<uint16_t>,
};

}  // namespace mx::act_quant_detail
