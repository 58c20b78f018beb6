// AVX2 BF16-weight GEMM: weights are widened to FP32 in registers (a 16-bit shift) and never
// in memory; up to four activation rows share each converted weight vector.
#include <immintrin.h>

#include "kernels/gemm.h"

namespace mx::gemm_detail {
namespace {

inline __m256 load_bf16x8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float bf16_scalar(uint16_t h) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h) << 16)));
}

// R activation rows against one weight row.
template <int R>
inline void dot_rows(const float* const* x, const uint16_t* w, int64_t k, float* out) {
  __m256 acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= k; i += 16) {
    const __m256 w0 = load_bf16x8(w + i);
    const __m256 w1 = load_bf16x8(w + i + 8);
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i), w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i + 8), w1, acc[r][1]);
    }
  }
  for (; i + 8 <= k; i += 8) {
    const __m256 w0 = load_bf16x8(w + i);
    for (int r = 0; r < R; ++r)
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x[r] + i), w0, acc[r][0]);
  }
  for (int r = 0; r < R; ++r) {
    float s = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
    for (int64_t j = i; j < k; ++j) s += x[r][j] * bf16_scalar(w[j]);
    out[r] = s;
  }
}

void bf16_avx2(const GemmBf16Args& a, int64_t n_begin, int64_t n_end) {
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) {
    const float* x[4] = {a.x + i * a.ldx, a.x + (i + 1) * a.ldx, a.x + (i + 2) * a.ldx,
                         a.x + (i + 3) * a.ldx};
    for (int64_t n = n_begin; n < n_end; ++n) {
      float out[4];
      dot_rows<4>(x, a.w + n * a.ldw, a.k, out);
      for (int r = 0; r < 4; ++r) a.y[(i + r) * a.ldy + n] = out[r];
    }
  }
  for (; i < a.m; ++i) {
    const float* x[1] = {a.x + i * a.ldx};
    for (int64_t n = n_begin; n < n_end; ++n)
      dot_rows<1>(x, a.w + n * a.ldw, a.k, a.y + i * a.ldy + n);
  }
}

}  // namespace

const GemmKernels kAvx2Gemm = {IsaLevel::kAvx2, bf16_avx2};

}  // namespace mx::gemm_detail
