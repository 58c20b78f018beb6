// AVX-512 softmax numerators (runtime/sampler_exp.h).
#include <immintrin.h>

#include "runtime/sampler_exp.h"

namespace mx::sampler_exp_detail {
namespace {

// exp(x) for x <= 0: n = round(x log2 e), r = x - n ln 2 (ln 2 as fdlibm's high part, exact
// times any n here, and low part), e^r by Horner over the Taylor coefficients to r^13
// (truncation 4e-18 relative for |r| <= ln2 / 2), vscalefpd for 2^n (0 below the subnormals).
inline __m512d exp8(__m512d x) {
  x = _mm512_max_pd(_mm512_set1_pd(-760.0), x);  // a NaN (second) runs through
  const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(1.4426950408889634)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(6.93147180369123816490e-01), x);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(1.90821492927058770002e-10), r);
  __m512d p = _mm512_set1_pd(kInvFactorial[13]);
  for (int k = 12; k >= 0; --k) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kInvFactorial[k]));
  return _mm512_scalef_pd(p, n);
}

void exps_avx512(const float* logits, int64_t n, double mx, double inv_t, double* out) {
  const __m512d m = _mm512_set1_pd(mx), s = _mm512_set1_pd(inv_t);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d l = _mm512_cvtps_pd(_mm256_loadu_ps(logits + i));
    _mm512_storeu_pd(out + i, exp8(_mm512_mul_pd(_mm512_sub_pd(l, m), s)));
  }
  if (i < n) {
    const auto k = static_cast<__mmask8>((1u << (n - i)) - 1);
    const __m512d l = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, logits + i));
    _mm512_mask_storeu_pd(out + i, k, exp8(_mm512_mul_pd(_mm512_sub_pd(l, m), s)));
  }
}

}  // namespace

const SamplerExpKernels kAvx512SamplerExp = {IsaLevel::kAvx512, exps_avx512};

}  // namespace mx::sampler_exp_detail
