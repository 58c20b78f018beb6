// kernels/vec_math_simd.h on eight FP32 lanes, for the translation units compiled with the AVX2
// flags: sigmoid_avx2 and silu_avx2.
//
// Internal linkage: each including unit keeps its own copies (see tile_plan.h).
#pragma once

#include <immintrin.h>

#include "kernels/vec_math_simd.h"

namespace mx {
namespace {

// 2^n built in the exponent field as 2 * 2^(n-1), so that n may reach 128: arguments are held
// within [-86.6, 88.73], past which expf overflows (and the product here does too, giving
// infinity as expf does) or returns less than 2.4e-38, which leaves 1 + exp(-x) at 1 in FP32
// either way.
struct VecMath8 {
  using T = __m256;
  static constexpr float kLo = -86.6f, kHi = 88.73f;
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T min(T a, T b) { return _mm256_min_ps(a, b); }
  static T max(T a, T b) { return _mm256_max_ps(a, b); }
  static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static T div(T a, T b) { return _mm256_div_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T fnmadd(T a, T b, T c) { return _mm256_fnmadd_ps(a, b, c); }
  static T round(T a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static T pow2(T p, T n) {
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
    return _mm256_mul_ps(_mm256_add_ps(p, p), _mm256_castsi256_ps(e));
  }
};

inline __m256 sigmoid_avx2(__m256 x) { return vsigmoid<VecMath8>(x); }
inline __m256 silu_avx2(__m256 x) { return vsilu<VecMath8>(x); }

}  // namespace
}  // namespace mx
