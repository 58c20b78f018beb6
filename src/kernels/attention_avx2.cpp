// AVX2 attention: kernels/attention_simd.h on eight lanes.
#include <immintrin.h>

#include "kernels/attention_simd.h"

namespace mx::attention_detail {
namespace {

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float hmax(__m256 v) {
  const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
}

// exp(x) for x <= 0 (arguments of a max-subtracted softmax): 2^(x log2 e) split into the
// nearest integer power of two and a degree-6 Taylor polynomial of the rest (|f| <= ln2 / 2),
// relative error ~2e-7; inputs are clamped at -87, where the result is ~1.6e-38.
inline __m256 exp_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 fl = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_mul_ps(_mm256_sub_ps(t, fl), _mm256_set1_ps(0.693147180559945309f));
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fl), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Eight cached values as FP32: FP32 as stored, BF16 widened (its bits are the FP32's top half).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// E4M3 codes: sign-extended to 32 bits and shifted left by 20, a code's seven exponent and
// mantissa bits land at the FP32 exponent's low end and copies of its sign fill bits 27-31;
// the mask keeps bit 31 of those. The pattern reads as the value times 2^-120 (subnormal codes
// become FP32 subnormals) and is scaled back exactly: four operations per eight codes. NaN
// codes are never written (a row that is not finite stores a NaN scale instead).
inline __m256 load8(const uint8_t* p) {
  const __m256i b = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i bits =
      _mm256_and_si256(_mm256_slli_epi32(b, 20), _mm256_set1_epi32(static_cast<int>(0x87F00000u)));
  return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
}
// Eight dot-product accumulators reduced to their eight sums, in order: pairs added within
// 128-bit lanes twice, then the two lanes. Every sum comes out of the same adds whatever its
// neighbours, so a score does not depend on how many positions share a pass.
inline __m256 reduce8(const __m256* a) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

struct V8 {
  using T = __m256;
  static constexpr int64_t W = 8;
  static T load(const float* p) { return load8(p); }
  static T load(const uint16_t* p) { return load8(p); }
  static T load(const uint8_t* p) { return load8(p); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T zero() { return _mm256_setzero_ps(); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T exp_nonpositive(T x) { return attention_detail::exp_nonpositive(x); }
  static float hmax(T v) { return attention_detail::hmax(v); }
  static double hsum(T v) { return attention_detail::hsum(v); }
  static T reduce(const T (&a)[W]) { return reduce8(a); }
};

}  // namespace

const AttentionKernels kAvx2Attention = {IsaLevel::kAvx2, group_paged<V8, float>,
                                         group_paged<V8, uint16_t>, group_scaled<V8, uint8_t>};

}  // namespace mx::attention_detail
