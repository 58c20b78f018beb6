// Block unpacking shared by the AVX2 translation units that read ggml blocks (the dequantizers
// and the block GEMM). Included only by units compiled with AVX2 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace mx::avx2 {

// The signed 6-bit codes (-32 .. 31) of half `half` of a Q6_K block `p`, in four quarters of 32:
// value 128 half + 32 r + l is nibble r / 2 of ql[64 half + 32 (r % 2) + l] with bits 2r, 2r + 1
// of qh[32 half + l] above it, minus 32.
inline void q6_k_half_codes(const uint8_t* p, int half, __m256i q[4]) {
  const __m256i nibble = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x03);
  const uint8_t* ql = p + 64 * half;
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + 32 * half));
  const __m256i low[4] = {_mm256_and_si256(l0, nibble), _mm256_and_si256(l1, nibble),
                          _mm256_and_si256(_mm256_srli_epi16(l0, 4), nibble),
                          _mm256_and_si256(_mm256_srli_epi16(l1, 4), nibble)};
  for (int r = 0; r < 4; ++r) {
    // Bits 2r..2r+1 of qh (masked per byte after the 16-bit shift) above the nibble.
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * r), two);
    q[r] =
        _mm256_sub_epi8(_mm256_or_si256(low[r], _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
  }
}

}  // namespace mx::avx2
