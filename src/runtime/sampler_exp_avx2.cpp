// AVX2 softmax numerators (runtime/sampler_exp.h).
#include <immintrin.h>

#include "runtime/sampler_exp.h"

namespace mx::sampler_exp_detail {
namespace {

// exp(x) for x <= 0 as the AVX-512 table computes it, with 2^n placed in the exponent field:
// n + 1023 lands in the low mantissa bits of n + 2^52 + 1023 and shifts up by 52. Arguments
// below -708, where n would leave the normal range, give 0.
inline __m256d exp4(__m256d x) {
  const __m256d low = _mm256_cmp_pd(x, _mm256_set1_pd(-708.0), _CMP_LT_OQ);
  x = _mm256_max_pd(_mm256_set1_pd(-708.0), x);  // a NaN (second) runs through
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(1.4426950408889634)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(6.93147180369123816490e-01), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(1.90821492927058770002e-10), r);
  __m256d p = _mm256_set1_pd(kInvFactorial[13]);
  for (int k = 12; k >= 0; --k) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kInvFactorial[k]));
  const __m256i bits =
      _mm256_slli_epi64(_mm256_castpd_si256(_mm256_add_pd(n, _mm256_set1_pd(0x1p52 + 1023.0))), 52);
  return _mm256_andnot_pd(low, _mm256_mul_pd(p, _mm256_castsi256_pd(bits)));
}

void exps_avx2(const float* logits, int64_t n, double mx, double inv_t, double* out) {
  const __m256d m = _mm256_set1_pd(mx), s = _mm256_set1_pd(inv_t);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d l = _mm256_cvtps_pd(_mm_loadu_ps(logits + i));
    _mm256_storeu_pd(out + i, exp4(_mm256_mul_pd(_mm256_sub_pd(l, m), s)));
  }
  for (; i < n; ++i) {
    alignas(32) double o[4];
    _mm256_store_pd(o, exp4(_mm256_set1_pd((static_cast<double>(logits[i]) - mx) * inv_t)));
    out[i] = o[0];
  }
}

}  // namespace

const SamplerExpKernels kAvx2SamplerExp = {IsaLevel::kAvx2, exps_avx2};

}  // namespace mx::sampler_exp_detail
