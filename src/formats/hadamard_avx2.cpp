// The block rotation with 8 lanes: distances 1, 2 and 4 inside a vector (a permute brings the
// partner, a blend keeps the difference where the index has the stage's bit), the longer ones
// between vectors; the reference's operations on every element, in its order.
#include <immintrin.h>

#include "formats/hadamard.h"

namespace mx::hadamard_detail {
namespace {

template <int kH>
__m256 stage_in(__m256 v) {
  __m256 p;
  if constexpr (kH == 1) {
    p = _mm256_permute_ps(v, 0xB1);
  } else if constexpr (kH == 2) {
    p = _mm256_permute_ps(v, 0x4E);
  } else {
    p = _mm256_permute2f128_ps(v, v, 0x01);
  }
  constexpr int kHi = kH == 1 ? 0xAA : kH == 2 ? 0xCC : 0xF0;
  return _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), kHi);
}

void rotate_avx2(float* x, int64_t n, int64_t block) {
  const __m256 s = _mm256_set1_ps(hadamard_scale(block));
  const int64_t nv = block / 8;
  __m256 v[16];  // block <= 128
  const int64_t full = n / block * block;
  for (int64_t b = 0; b < full; b += block) {
    float* p = x + b;
    for (int64_t i = 0; i < nv; ++i) {
      v[i] = stage_in<4>(stage_in<2>(stage_in<1>(_mm256_loadu_ps(p + 8 * i))));
    }
    for (int64_t h = 1; h < nv; h *= 2) {
      for (int64_t i = 0; i < nv; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const __m256 a = v[j], c = v[j + h];
          v[j] = _mm256_add_ps(a, c);
          v[j + h] = _mm256_sub_ps(a, c);
        }
      }
    }
    for (int64_t i = 0; i < nv; ++i) _mm256_storeu_ps(p + 8 * i, _mm256_mul_ps(v[i], s));
  }
  rotate_tail_scalar(x + full, n - full);
}

}  // namespace

const HadamardKernels kAvx2Hadamard = {IsaLevel::kAvx2, rotate_avx2};

}  // namespace mx::hadamard_detail
