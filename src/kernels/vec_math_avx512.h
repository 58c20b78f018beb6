// exp, SiLU and the logistic sigmoid on sixteen FP32 lanes, for the translation units compiled
// with the AVX-512 flags (kernels/glu.h states the accuracy: within 2 ulp of expf).
//
// Internal linkage: each including unit keeps its own copies (see tile_plan.h).
#pragma once

#include <immintrin.h>

namespace mx {
namespace {

// exp(x): n = round(x log2 e), r = x - n ln 2 with ln 2 in a high part exact in FP32 and a low
// part (|r| <= ln2 / 2 + a few ulp), e^r by its Taylor polynomial to r^7 (truncation 5e-9
// relative), and vscalefps for 2^n, which gives infinity past FP32's range and zero (through
// the subnormals) below it, as expf does.
inline __m512 exp_avx512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-110.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606820309417232e-6f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// 1 / (1 + exp(-x)) and x / (1 + exp(-x)), the scalar formulas' operations after the exp.
inline __m512 sigmoid_avx512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one, _mm512_add_ps(one, exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}
inline __m512 silu_avx512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(x, _mm512_add_ps(one, exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

}  // namespace
}  // namespace mx
