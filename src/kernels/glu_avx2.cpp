// AVX2 gated activations (kernels/glu.h).
#include <immintrin.h>

#include "kernels/glu.h"

namespace mx::glu_detail {
namespace {

// exp(x) as the AVX-512 table computes it, with 2^n built in the exponent field as 2 * 2^(n-1),
// so that n may reach 128: x is held within [-86.6, 88.73], past which expf overflows (and the
// product here does too, giving infinity as expf does) or returns less than 2.4e-38, which
// leaves 1 + exp(-g) at 1 in FP32 either way.
inline __m256 exp8(__m256 x) {
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

inline __m256 swiglu8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, swiglu8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    alignas(32) float g[8] = {}, u[8] = {}, o[8];
    for (int64_t j = i; j < n; ++j) {
      g[j - i] = gate[j];
      u[j - i] = up[j];
    }
    _mm256_store_ps(o, swiglu8(_mm256_load_ps(g), _mm256_load_ps(u)));
    for (int64_t j = i; j < n; ++j) out[j] = o[j - i];
  }
}

}  // namespace

const GluKernels kAvx2Glu = {IsaLevel::kAvx2, swiglu_avx2};

}  // namespace mx::glu_detail
