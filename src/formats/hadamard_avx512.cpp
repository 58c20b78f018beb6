// The block rotation with 16 lanes: the stages of distance 1, 2, 4 and 8 inside a vector (the
// partner brought by a permute, the lanes that take the difference chosen by a mask), the
// longer ones between vectors; the reference's operations on every element, in its order.
#include <immintrin.h>

#include "formats/hadamard.h"

namespace mx::hadamard_detail {
namespace {

// Lanes whose index has bit h set hold the second of their pair: partner - self; the others
// self + partner (the same sum, addition being commutative).
template <int kH>
__m512 stage_in(__m512 v) {
  __m512 p;
  __mmask16 hi;
  if constexpr (kH == 1) {
    p = _mm512_permute_ps(v, 0xB1);
    hi = 0xAAAA;
  } else if constexpr (kH == 2) {
    p = _mm512_permute_ps(v, 0x4E);
    hi = 0xCCCC;
  } else if constexpr (kH == 4) {
    p = _mm512_shuffle_f32x4(v, v, 0xB1);
    hi = 0xF0F0;
  } else {
    p = _mm512_shuffle_f32x4(v, v, 0x4E);
    hi = 0xFF00;
  }
  return _mm512_mask_sub_ps(_mm512_add_ps(v, p), hi, p, v);
}

void rotate_avx512(float* x, int64_t n, int64_t block) {
  const __m512 s = _mm512_set1_ps(hadamard_scale(block));
  const int64_t nv = block / 16;
  __m512 v[8];  // block <= 128
  const int64_t full = n / block * block;
  for (int64_t b = 0; b < full; b += block) {
    float* p = x + b;
    for (int64_t i = 0; i < nv; ++i) {
      v[i] = stage_in<8>(stage_in<4>(stage_in<2>(stage_in<1>(_mm512_loadu_ps(p + 16 * i)))));
    }
    for (int64_t h = 1; h < nv; h *= 2) {
      for (int64_t i = 0; i < nv; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const __m512 a = v[j], c = v[j + h];
          v[j] = _mm512_add_ps(a, c);
          v[j + h] = _mm512_sub_ps(a, c);
        }
      }
    }
    for (int64_t i = 0; i < nv; ++i) _mm512_storeu_ps(p + 16 * i, _mm512_mul_ps(v[i], s));
  }
  rotate_tail_scalar(x + full, n - full);
}

}  // namespace

const HadamardKernels kAvx512Hadamard = {IsaLevel::kAvx512, rotate_avx512};

}  // namespace mx::hadamard_detail
