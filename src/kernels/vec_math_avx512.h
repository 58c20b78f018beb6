// kernels/vec_math_simd.h on sixteen FP32 lanes, for the translation units compiled with the
// AVX-512 flags: sigmoid_avx512 and silu_avx512.
//
// Internal linkage: each including unit keeps its own copies (see tile_plan.h).
#pragma once

#include <immintrin.h>

#include "kernels/vec_math_simd.h"

namespace mx {
namespace {

// vscalefps for 2^n: infinity past FP32's range, zero through the subnormals below it.
struct VecMath16 {
  using T = __m512;
  static constexpr float kLo = -110.0f, kHi = 100.0f;
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T min(T a, T b) { return _mm512_min_ps(a, b); }
  static T max(T a, T b) { return _mm512_max_ps(a, b); }
  static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static T div(T a, T b) { return _mm512_div_ps(a, b); }
  static T fmadd(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T fnmadd(T a, T b, T c) { return _mm512_fnmadd_ps(a, b, c); }
  static T round(T a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static T pow2(T p, T n) { return _mm512_scalef_ps(p, n); }
};

inline __m512 sigmoid_avx512(__m512 x) { return vsigmoid<VecMath16>(x); }
inline __m512 silu_avx512(__m512 x) { return vsilu<VecMath16>(x); }

}  // namespace
}  // namespace mx
