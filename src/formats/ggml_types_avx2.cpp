// AVX2 dequantizers for the ggml types that loading and the GGUF GEMM spend their time on:
// Q8_0, Q4_K, Q5_K, Q6_K, MXFP4, F16 (F16C) and BF16. Each performs the reference's FP32
// operations in the same order, lane by lane, so the results are the reference's bit for bit.
// Compiled with AVX2 flags: nothing inline from shared headers here (see ggml_types.h).
#include <immintrin.h>

#include <bit>
#include <cstring>
#include <type_traits>

#include "formats/ggml_types.h"

namespace mx::ggml_detail {
namespace {

// FP16 bits to FP32 as formats/half.h decodes them. F16C agrees on every finite value and
// Inf; for NaN half.h returns the default quiet NaN with the sign kept, F16C the payload.
inline float half_to_float(uint16_t h) {
  if ((h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0) {
    return std::bit_cast<float>((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7FC00000u);
  }
  return _cvtsh_ss(h);
}

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

inline __m256 half8_to_float(__m128i h) {
  const __m256 f = _mm256_cvtph_ps(h);
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  if (_mm256_testz_ps(nan, nan)) return f;
  const __m256 canonical = _mm256_or_ps(
      _mm256_and_ps(f, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)))),
      _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)));
  return _mm256_blendv_ps(f, canonical, nan);
}

// The reference rounds the product before subtracting. GCC's intrinsics are plain vector
// operators and -ffp-contract=fast (its C++ default) would fuse them into an FMA here.
inline __m256 mul_rounded(__m256 a, __m256 b) {
  __m256 p = _mm256_mul_ps(a, b);
  __asm__("" : "+x"(p));
  return p;
}

inline __m256 i8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
inline __m256 u8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }

// 32 unsigned bytes q to y[l] = d * q[l] - m.
inline void affine32(__m256i q, float d, float m, float* y) {
  const __m256 dv = _mm256_set1_ps(d);
  const __m256 mv = _mm256_set1_ps(m);
  const __m128i lo = _mm256_castsi256_si128(q);
  const __m128i hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(y, _mm256_sub_ps(mul_rounded(dv, u8_to_ps(lo)), mv));
  _mm256_storeu_ps(y + 8, _mm256_sub_ps(mul_rounded(dv, u8_to_ps(_mm_srli_si128(lo, 8))), mv));
  _mm256_storeu_ps(y + 16, _mm256_sub_ps(mul_rounded(dv, u8_to_ps(hi)), mv));
  _mm256_storeu_ps(y + 24, _mm256_sub_ps(mul_rounded(dv, u8_to_ps(_mm_srli_si128(hi, 8))), mv));
}

// 32 signed bytes q to y[l] = s[l / 8] * q[l].
inline void scaled32(__m256i q, const __m256 s[4], float* y) {
  const __m128i lo = _mm256_castsi256_si128(q);
  const __m128i hi = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(y, _mm256_mul_ps(s[0], i8_to_ps(lo)));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(s[1], i8_to_ps(_mm_srli_si128(lo, 8))));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(s[2], i8_to_ps(hi)));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(s[3], i8_to_ps(_mm_srli_si128(hi, 8))));
}

void f16(const uint8_t* blocks, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 2 * i));
    _mm256_storeu_ps(out + i, half8_to_float(h));
  }
  for (; i < n; ++i) out[i] = load_half(blocks + 2 * i);
}

void bf16(const uint8_t* blocks, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 2 * i));
    const __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, blocks + 2 * i, 2);
    out[i] = std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
  }
}

void q8_0(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockQ8_0));
    const __m256 d = _mm256_set1_ps(load_half(p));
    const __m256 s[4] = {d, d, d, d};
    scaled32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)), s, out + b * kGgmlQK);
  }
}

// Q4_K and Q5_K: per sub-block s, d * sc[s] and dmin * m[s] are FP32 products first, as in
// the reference; then each value is (d * sc) * q - (dmin * m).
template <bool kFifthBit>
void k4(const uint8_t* blocks, float* out, int64_t n) {
  using Block = std::conditional_t<kFifthBit, GgmlBlockQ5_K, GgmlBlockQ4_K>;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(Block));
    const float d = load_half(p);
    const float dmin = load_half(p + 2);
    uint8_t sc[8], m[8];
    unpack_k4_scales(p + 4, sc, m);
    const uint8_t* qs = p + (kFifthBit ? 48 : 16);
    __m256i qh = kFifthBit ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16))
                           : _mm256_setzero_si256();
    float* y = out + b * kGgmlQK_K;
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j));
      __m256i lo = _mm256_and_si256(q, nibble);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), nibble);
      if constexpr (kFifthBit) {
        // qh is shifted by 2 per pair of sub-blocks: bits 0 and 1 of each byte are the fifth
        // bits of sub-blocks 2j and 2j + 1 (16-bit shifts move nothing into those bits).
        const __m256i b0 = _mm256_and_si256(qh, _mm256_set1_epi8(1));
        const __m256i b1 = _mm256_and_si256(qh, _mm256_set1_epi8(2));
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 3));
        qh = _mm256_srli_epi16(qh, 2);
      }
      const int s = 2 * j;
      affine32(lo, d * static_cast<float>(sc[s]), dmin * static_cast<float>(m[s]), y + 64 * j);
      affine32(hi, d * static_cast<float>(sc[s + 1]), dmin * static_cast<float>(m[s + 1]),
               y + 64 * j + 32);
    }
  }
}

void q6_k(const uint8_t* blocks, float* out, int64_t n) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i two = _mm256_set1_epi8(0x03);
  const __m256i bias = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockQ6_K));
    const float d = load_half(p + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(p + 192);
    __m256 ds[16];
    for (int i = 0; i < 16; ++i) ds[i] = _mm256_set1_ps(d * static_cast<float>(scales[i]));
    float* y = out + b * kGgmlQK_K;
    for (int half = 0; half < 2; ++half) {
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
        const __m256i q =
            _mm256_sub_epi8(_mm256_or_si256(low[r], _mm256_slli_epi16(high, 4)), bias);
        const int g = 8 * half + 2 * r;  // scale of the first 16 of these 32 values
        const __m256 s[4] = {ds[g], ds[g], ds[g + 1], ds[g + 1]};
        scaled32(q, s, y + 128 * half + 32 * r);
      }
    }
  }
}

void mxfp4(const uint8_t* blocks, float* out, int64_t n) {
  const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i nibble = _mm_set1_epi8(0x0F);
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockMxfp4));
    // 2^(e - 128); e = 0 and 1 are the FP32 subnormals 2^-128 and 2^-127.
    const uint32_t e = p[0];
    const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
    const __m256 d = _mm256_set1_ps(std::bit_cast<float>(bits));
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 1));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(qs, nibble));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(qs, 4), nibble));
    const __m256 s[4] = {d, d, d, d};
    scaled32(_mm256_set_m128i(hi, lo), s, out + b * kGgmlQK);
  }
}

constexpr GgmlKernels make_avx2_kernels() {
  GgmlKernels k{IsaLevel::kAvx2, {}};
  auto set = [&k](GgmlType t, GgmlDequantFn f) { k.dequant[static_cast<uint32_t>(t)] = f; };
  set(GgmlType::kF32, ref_f32);  // a copy: memcpy is as fast as it gets
  set(GgmlType::kF16, f16);
  set(GgmlType::kBF16, bf16);
  set(GgmlType::kQ4_0, ref_q4_0);
  set(GgmlType::kQ4_1, ref_q4_1);
  set(GgmlType::kQ5_0, ref_q5_0);
  set(GgmlType::kQ5_1, ref_q5_1);
  set(GgmlType::kQ8_0, q8_0);
  set(GgmlType::kQ2_K, ref_q2_k);
  set(GgmlType::kQ3_K, ref_q3_k);
  set(GgmlType::kQ4_K, k4<false>);
  set(GgmlType::kQ5_K, k4<true>);
  set(GgmlType::kQ6_K, q6_k);
  set(GgmlType::kMXFP4, mxfp4);
  return k;
}

}  // namespace

constinit const GgmlKernels kAvx2Ggml = make_avx2_kernels();

}  // namespace mx::ggml_detail
