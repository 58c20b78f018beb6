// AVX2 gated activations (kernels/glu.h).
#include <immintrin.h>

#include "kernels/glu.h"
#include "kernels/vec_math_avx2.h"

namespace mx::glu_detail {
namespace {

// f(a, b) -> the result for eight lanes of a and b, written to out; the last partial group
// through a zero-padded copy.
template <typename F>
inline void each8(const float* a, const float* b, int64_t n, float* out, F&& f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  if (i < n) {
    alignas(32) float pa[8] = {}, pb[8] = {}, o[8];
    for (int64_t j = i; j < n; ++j) {
      pa[j - i] = a[j];
      pb[j - i] = b[j];
    }
    _mm256_store_ps(o, f(_mm256_load_ps(pa), _mm256_load_ps(pb)));
    for (int64_t j = i; j < n; ++j) out[j] = o[j - i];
  }
}

void swiglu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  each8(gate, up, n, out, [](__m256 g, __m256 u) { return _mm256_mul_ps(silu_avx2(g), u); });
}

void sigmoid_gate_avx2(const float* gate, int64_t n, float* x) {
  each8(gate, x, n, x, [](__m256 g, __m256 v) { return _mm256_mul_ps(v, sigmoid_avx2(g)); });
}

}  // namespace

const GluKernels kAvx2Glu = {IsaLevel::kAvx2, swiglu_avx2, sigmoid_gate_avx2};

}  // namespace mx::glu_detail
