// exp, SiLU and the logistic sigmoid on eight FP32 lanes, for the translation units compiled
// with the AVX2 flags (kernels/glu.h states the accuracy: within 2 ulp of expf).
//
// Internal linkage: each including unit keeps its own copies (see tile_plan.h).
#pragma once

#include <immintrin.h>

namespace mx {
namespace {

// exp(x) as exp_avx512 computes it, with 2^n built in the exponent field as 2 * 2^(n-1), so
// that n may reach 128: x is held within [-86.6, 88.73], past which expf overflows (and the
// product here does too, giving infinity as expf does) or returns less than 2.4e-38, which
// leaves 1 + exp(-x) at 1 in FP32 either way.
inline __m256 exp_avx2(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.73f)), _mm256_set1_ps(-86.6f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606820309417232e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(126)), 23);
  return _mm256_mul_ps(_mm256_add_ps(p, p), _mm256_castsi256_ps(e));
}

// 1 / (1 + exp(-x)) and x / (1 + exp(-x)), the scalar formulas' operations after the exp.
inline __m256 sigmoid_avx2(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
inline __m256 silu_avx2(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(x, _mm256_add_ps(one, exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

}  // namespace
}  // namespace mx
