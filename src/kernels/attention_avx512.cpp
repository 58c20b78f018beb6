// AVX-512 attention: kernels/attention_simd.h on sixteen lanes.
#include <immintrin.h>

#include "kernels/attention_simd.h"

namespace mx::attention_detail {
namespace {

// exp(x) for x <= 0, as exp_nonpositive in the AVX2 kernel: 2^(x log2 e) split into the
// nearest power of two and a degree-6 Taylor polynomial of the rest; clamped at -87.
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 fl = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, fl), _mm512_set1_ps(0.693147180559945309f));
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fl), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// Sixteen cached values as FP32: FP32 as stored, BF16 widened, E4M3 codes as the value times
// 2^-120 moved into an FP32 pattern and scaled back exactly (the AVX2 kernel's load8).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load16(const uint8_t* p) {
  const __m512i b = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i bits =
      _mm512_and_si512(_mm512_slli_epi32(b, 20), _mm512_set1_epi32(static_cast<int>(0x87F00000u)));
  return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
}
// The sums of sixteen accumulators, lane i holding a[i]'s: halves, then quarters, then pairs
// and single lanes added, by 128-bit and in-lane shuffles that only move data, so that every
// sum is the same tree of adds whatever its neighbours.
inline __m512 reduce16(const __m512 (&a)[16]) {
  __m512 c[8], e[4], g[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    g[i] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0xEE));
  }
  const __m512 s =
      _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xDD));
  // Lane 4q + r now holds a[4r + q]'s sum.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, s);
}

struct V16 {
  using T = __m512;
  static constexpr int64_t W = 16;
  static T load(const float* p) { return load16(p); }
  static T load(const uint16_t* p) { return load16(p); }
  static T load(const uint8_t* p) { return load16(p); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T zero() { return _mm512_setzero_ps(); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T exp_nonpositive(T x) { return attention_detail::exp_nonpositive(x); }
  // The lanes in order: the largest, and the sum in double.
  static float hmax(T v) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    float m = lanes[0];
    for (int i = 1; i < 16; ++i) m = __builtin_fmaxf(m, lanes[i]);
    return m;
  }
  static double hsum(T v) {
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, v);
    double s = 0;
    for (int i = 0; i < 16; ++i) s += lanes[i];
    return s;
  }
  static T reduce(const T (&a)[W]) { return reduce16(a); }
};

}  // namespace

const AttentionKernels kAvx512Attention = {IsaLevel::kAvx512, group_paged<V16, float>,
                                           group_paged<V16, uint16_t>, group_scaled<V16, uint8_t>};

}  // namespace mx::attention_detail
