#include <immintrin.h>

#include "runtime/machine_peaks.h"

namespace mx::peaks_detail {

double read_sum_avx2(const float* p, int64_t n, float* sink) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  *sink += out[0];
  return static_cast<double>(i) * sizeof(float);
}

// Twelve independent FMA chains: enough to cover the latency of two FMA pipes.
double fp32_fma_avx2(int64_t iters, float* sink) {
  constexpr int kChains = 12;
  __m256 a[kChains];
  for (int j = 0; j < kChains; ++j) a[j] = _mm256_set1_ps(0.001f * static_cast<float>(j));
  const __m256 b = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int j = 0; j < kChains; ++j) a[j] = _mm256_fmadd_ps(a[j], b, c);
  }
  __m256 s = a[0];
  for (int j = 1; j < kChains; ++j) s = _mm256_add_ps(s, a[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  *sink += out[0];
  return static_cast<double>(iters) * kChains * 8 * 2;
}

// The integer loops keep four chains with an operand of their own each: more (or operands
// shared between chains) and GCC spills a chain through the stack or computes a shared
// product once, and the loop then measures store forwarding or the adds alone. The operands
// are opaque to it each iteration, or it hoists the loop-invariant products out of the loop.
constexpr int kIntChains = 4;

// s16 x s16 pairs summed to s32 (vpmaddwd) and accumulated (vpaddd): 16 multiply-adds per
// 256-bit step, what the AVX2 W4A8 kernels for several rows do per product of 14-bit
// activations and E2M1 weights. AVX2 has no fused integer multiply-accumulate, so the add
// shares the vector pipes with the multiply.
double int16_dot_avx2(int64_t iters, int* sink) {
  __m256i acc[kIntChains], b[kIntChains];
  const __m256i a = _mm256_set1_epi16(3);
  for (int j = 0; j < kIntChains; ++j) {
    acc[j] = _mm256_set1_epi32(j);
    b[j] = _mm256_set1_epi16(static_cast<int16_t>(j - 2));
  }
  for (int64_t it = 0; it < iters; ++it) {
    for (int j = 0; j < kIntChains; ++j) {
      asm("" : "+x"(b[j]));
      acc[j] = _mm256_add_epi32(acc[j], _mm256_madd_epi16(a, b[j]));
    }
  }
  __m256i s = acc[0];
  for (int j = 1; j < kIntChains; ++j) s = _mm256_add_epi32(s, acc[j]);
  *sink ^= _mm256_extract_epi32(s, 0);
  return static_cast<double>(iters) * kIntChains * 16 * 2;
}

// u8 x s8 pairs summed to s16 (vpmaddubsw) and accumulated in s16 lanes (vpaddw): 32
// multiply-adds per 256-bit step, what the AVX2 W4A4 kernels do per 32 products (they widen
// the 16-bit sums once per block).
double int8_dot_avx2(int64_t iters, int* sink) {
  __m256i acc[kIntChains], b[kIntChains];
  const __m256i a = _mm256_set1_epi8(3);
  for (int j = 0; j < kIntChains; ++j) {
    acc[j] = _mm256_set1_epi16(static_cast<int16_t>(j));
    b[j] = _mm256_set1_epi8(static_cast<char>(j - 2));
  }
  for (int64_t it = 0; it < iters; ++it) {
    for (int j = 0; j < kIntChains; ++j) {
      asm("" : "+x"(b[j]));
      acc[j] = _mm256_add_epi16(acc[j], _mm256_maddubs_epi16(a, b[j]));
    }
  }
  __m256i s = acc[0];
  for (int j = 1; j < kIntChains; ++j) s = _mm256_add_epi16(s, acc[j]);
  *sink ^= _mm256_extract_epi32(s, 0);  // keeps the result live; the sums wrap
  return static_cast<double>(iters) * kIntChains * 32 * 2;
}

}  // namespace mx::peaks_detail
