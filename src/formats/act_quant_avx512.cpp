// AVX-512 activation quantization: the AVX2 algorithm on 16 lanes, with mask blends and
// down-converting stores. Compiled with AVX-512 flags: no inline functions from shared headers
// here (see act_quant.h).
#include <immintrin.h>

#include "formats/act_quant.h"

namespace mx::act_quant_detail {
namespace {

constexpr int kBlock = 32;
constexpr int kRuleRceil = 1;  // ScaleRule::kRceil

struct Elem {
  int emax;
  unsigned max_mantissa;
};
constexpr Elem kE4M3 = {8, 0x600000u};
constexpr Elem kE2M1 = {2, 0x400000u};

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <typename T>
inline int load_block(const T* x, const Elem& f, int rule, __m512 v[2]) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  v[0] = load16(x);
  v[1] = load16(x + 16);
  // Integer max of the magnitudes' bits: NaN (above Inf) wins.
  const __m512i m = _mm512_max_epi32(_mm512_and_si512(_mm512_castps_si512(v[0]), abs_mask),
                                     _mm512_and_si512(_mm512_castps_si512(v[1]), abs_mask));
  const unsigned bits = static_cast<unsigned>(_mm512_reduce_max_epi32(m));
  if (bits < 0x00800000u || bits >= 0x7F800000u) return -1000;
  int e = static_cast<int>(bits >> 23) - 127 - f.emax;
  if (rule == kRuleRceil && (bits & 0x7FFFFFu) > f.max_mantissa) ++e;
  return e < -127 ? -127 : e;
}

inline __m512 scale_by(__m512 v, int e) {
  return _mm512_mul_ps(v, _mm512_castsi512_ps(_mm512_set1_epi32((127 - e) << 23)));
}

inline __m512i to_e4m3(__m512 y) {
  const __m512i yi = _mm512_castps_si512(y);
  const __m512i sign = _mm512_srli_epi32(_mm512_and_si512(yi, _mm512_set1_epi32(INT32_MIN)), 24);
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(y), _mm512_set1_ps(448.0f));
  const __m512i ai = _mm512_castps_si512(a);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(ai, 20), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(ai, _mm512_set1_epi32(0x7FFFF)), odd);
  const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(r, 20), _mm512_set1_epi32(120 << 3));
  const __m512 t = _mm512_add_ps(a, _mm512_set1_ps(16384.0f));
  const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x46800000));
  const __mmask16 is_sub = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0x1p-6f), _CMP_LT_OQ);
  return _mm512_or_si512(_mm512_mask_blend_epi32(is_sub, normal, sub), sign);
}

inline __m512i to_e2m1(__m512 y) {
  const __m512i yi = _mm512_castps_si512(y);
  const __m512i sign = _mm512_srli_epi32(_mm512_and_si512(yi, _mm512_set1_epi32(INT32_MIN)), 28);
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(y), _mm512_set1_ps(6.0f));
  const __m512i ai = _mm512_castps_si512(a);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(ai, 22), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(_mm512_add_epi32(ai, _mm512_set1_epi32(0x1FFFFF)), odd);
  const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(r, 22), _mm512_set1_epi32(126 << 1));
  const __m512 t = _mm512_add_ps(a, _mm512_set1_ps(4194304.0f));
  const __m512i sub = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4A800000));
  const __mmask16 is_sub = _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_LT_OQ);
  return _mm512_or_si512(_mm512_mask_blend_epi32(is_sub, normal, sub), sign);
}

// 16 E2M1 codes (int32 lanes) to 8 bytes, element 2i in the low nibble.
inline __m128i pack_nibbles(__m512i c) {
  const __m512i pairs = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
  return _mm512_cvtepi64_epi8(_mm512_and_si512(pairs, _mm512_set1_epi64(0xFF)));
}

template <typename T>
void tail_or_fallback_fp8(const T* x, int n, ScaleRule rule, uint8_t* codes, uint8_t* scale) {
  if constexpr (sizeof(T) == 4) {
    block_f32_to_mxfp8(reinterpret_cast<const float*>(x), n, rule, codes, scale);
  } else {
    block_bf16_to_mxfp8(reinterpret_cast<const uint16_t*>(x), n, rule, codes, scale);
  }
}

template <typename T>
void tail_or_fallback_fp4(const T* x, int n, ScaleRule rule, uint8_t* packed, uint8_t* scale) {
  if constexpr (sizeof(T) == 4) {
    block_f32_to_mxfp4(reinterpret_cast<const float*>(x), n, rule, packed, scale);
  } else {
    block_bf16_to_mxfp4(reinterpret_cast<const uint16_t*>(x), n, rule, packed, scale);
  }
}

template <typename T>
void row_mxfp8(const T* x, int64_t k, ScaleRule rule, uint8_t* codes, uint8_t* scales) {
  const int64_t full = k / kBlock;
  for (int64_t b = 0; b < full; ++b) {
    __m512 v[2];
    const int e = load_block(x + b * kBlock, kE4M3, static_cast<int>(rule), v);
    if (e == -1000) {
      tail_or_fallback_fp8(x + b * kBlock, kBlock, rule, codes + b * kBlock, scales + b);
      continue;
    }
    scales[b] = static_cast<uint8_t>(e + 127);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + b * kBlock),
                     _mm512_cvtepi32_epi8(to_e4m3(scale_by(v[0], e))));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + b * kBlock + 16),
                     _mm512_cvtepi32_epi8(to_e4m3(scale_by(v[1], e))));
  }
  const int rest = static_cast<int>(k - full * kBlock);
  if (rest > 0) {
    tail_or_fallback_fp8(x + full * kBlock, rest, rule, codes + full * kBlock, scales + full);
  }
}

template <typename T>
void row_mxfp4(const T* x, int64_t k, ScaleRule rule, uint8_t* packed, uint8_t* scales) {
  const int64_t full = k / kBlock;
  for (int64_t b = 0; b < full; ++b) {
    uint8_t* out = packed + b * (kBlock / 2);
    __m512 v[2];
    const int e = load_block(x + b * kBlock, kE2M1, static_cast<int>(rule), v);
    if (e == -1000) {
      tail_or_fallback_fp4(x + b * kBlock, kBlock, rule, out, scales + b);
      continue;
    }
    scales[b] = static_cast<uint8_t>(e + 127);
    const __m128i lo = pack_nibbles(to_e2m1(scale_by(v[0], e)));
    const __m128i hi = pack_nibbles(to_e2m1(scale_by(v[1], e)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi64(lo, hi));
  }
  const int rest = static_cast<int>(k - full * kBlock);
  if (rest > 0) {
    tail_or_fallback_fp4(x + full * kBlock, rest, rule, packed + full * (kBlock / 2),
                         scales + full);
  }
}

}  // namespace

const ActQuantKernels kAvx512Kernels = {
    IsaLevel::kAvx512, row_mxfp8<float>, row_mxfp8<uint16_t>, row_mxfp4<float>, row_mxfp4<uint16_t>,
};

}  // namespace mx::act_quant_detail
