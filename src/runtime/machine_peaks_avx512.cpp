// The AVX-512 peaks: what the AVX-512 kernels can reach where the CPU has them.
#include <immintrin.h>

#include "runtime/machine_peaks.h"

namespace mx::peaks_detail {

// Twelve independent 512-bit FMA chains: enough to cover the latency of two FMA pipes.
double fp32_fma_avx512(int64_t iters, float* sink) {
  constexpr int kChains = 12;
  __m512 a[kChains];
  for (int j = 0; j < kChains; ++j) a[j] = _mm512_set1_ps(0.001f * static_cast<float>(j));
  const __m512 b = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int j = 0; j < kChains; ++j) a[j] = _mm512_fmadd_ps(a[j], b, c);
  }
  __m512 s = a[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_add_ps(s, a[j]);
  float out[16];
  _mm512_storeu_ps(out, s);
  *sink += out[0];
  return static_cast<double>(iters) * kChains * 16 * 2;
}

// VNNI: u8 x s8 quadruples summed into s32 lanes (vpdpbusd), 64 multiply-adds per step.
double int8_dot_avx512(int64_t iters, int* sink) {
  constexpr int kChains = 12;
  __m512i acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it) {
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  }
  __m512i s = acc[0];
  for (int j = 1; j < kChains; ++j) s = _mm512_xor_si512(s, acc[j]);
  int out[16];
  _mm512_storeu_si512(out, s);
  *sink ^= out[0];
  return static_cast<double>(iters) * kChains * 64 * 2;
}

}  // namespace mx::peaks_detail
