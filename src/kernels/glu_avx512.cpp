// AVX-512 gated activations (kernels/glu.h).
#include <immintrin.h>

#include "kernels/glu.h"
#include "kernels/vec_math_avx512.h"

namespace mx::glu_detail {
namespace {

// f(v, i) for the sixteen lanes at i, the last partial group through masked loads and stores.
template <typename F>
inline void each16(int64_t n, F&& f) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) f(static_cast<__mmask16>(0xFFFF), i);
  if (i < n) f(static_cast<__mmask16>((1u << (n - i)) - 1), i);
}

void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out) {
  each16(n, [&](__mmask16 m, int64_t i) {
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), u = _mm512_maskz_loadu_ps(m, up + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(silu_avx512(g), u));
  });
}

void sigmoid_gate_avx512(const float* gate, int64_t n, float* x) {
  each16(n, [&](__mmask16 m, int64_t i) {
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i), v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(v, sigmoid_avx512(g)));
  });
}

}  // namespace

const GluKernels kAvx512Glu = {IsaLevel::kAvx512, swiglu_avx512, sigmoid_gate_avx512};

}  // namespace mx::glu_detail
