// AVX2 dequantizers of every supported ggml type but F32 (a copy): the GGUF GEMM dequantizes
// through them whenever it has no fused path, so a type left to its scalar reference makes
// decode on its files several times slower. Each performs the reference's FP32
// operations in the same order, lane by lane, so the results are the reference's bit for bit.
// Compiled with AVX2 flags: nothing inline from shared headers here (see ggml_types.h).
#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "formats/ggml_avx2.h"
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

// 32 unsigned bytes q to y[l] = d[l / 8] * q[l] - m[l / 8], or + m[l / 8] with kAdd (Q4_1
// and Q5_1 add their min, the K-quants subtract theirs); the product rounded first.
template <bool kAdd = false>
inline void affine32(__m256i q, const __m256 d[4], const __m256 m[4], float* y) {
  const __m128i lo = _mm256_castsi256_si128(q);
  const __m128i hi = _mm256_extracti128_si256(q, 1);
  const __m256 v[4] = {u8_to_ps(lo), u8_to_ps(_mm_srli_si128(lo, 8)), u8_to_ps(hi),
                       u8_to_ps(_mm_srli_si128(hi, 8))};
  for (int i = 0; i < 4; ++i) {
    const __m256 p = mul_rounded(d[i], v[i]);
    _mm256_storeu_ps(y + 8 * i, kAdd ? _mm256_add_ps(p, m[i]) : _mm256_sub_ps(p, m[i]));
  }
}

inline void affine32(__m256i q, float d, float m, float* y) {
  const __m256 dv[4] = {_mm256_set1_ps(d), _mm256_set1_ps(d), _mm256_set1_ps(d), _mm256_set1_ps(d)};
  const __m256 mv[4] = {_mm256_set1_ps(m), _mm256_set1_ps(m), _mm256_set1_ps(m), _mm256_set1_ps(m)};
  affine32(q, dv, mv, y);
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

// The 32 codes of a 32-block whose element j is the low nibble of qs[j] and element j + 16
// the high one (Q4_0, Q4_1, Q5_0, Q5_1), in element order.
inline __m256i split_nibbles(const uint8_t* qs) {
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), nibble), _mm_and_si128(q, nibble));
}

// Byte j = 0x10 where bit j of the little-endian qh is set: the fifth bits of Q5_0 / Q5_1.
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Q4_0 and Q5_0: (q - bias) * d, one product per value.
template <bool kFifthBit>
void q4_5_0(const uint8_t* blocks, float* out, int64_t n) {
  using Block = std::conditional_t<kFifthBit, GgmlBlockQ5_0, GgmlBlockQ4_0>;
  const __m256i bias = _mm256_set1_epi8(kFifthBit ? 16 : 8);
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(Block));
    const __m256 d = _mm256_set1_ps(load_half(p));
    __m256i q = split_nibbles(p + offsetof(Block, qs));
    if constexpr (kFifthBit) q = _mm256_or_si256(q, fifth_bits(p + offsetof(Block, qh)));
    const __m256 s[4] = {d, d, d, d};
    scaled32(_mm256_sub_epi8(q, bias), s, out + b * kGgmlQK);
  }
}

// Q4_1 and Q5_1: q * d rounded, then + m.
template <bool kFifthBit>
void q4_5_1(const uint8_t* blocks, float* out, int64_t n) {
  using Block = std::conditional_t<kFifthBit, GgmlBlockQ5_1, GgmlBlockQ4_1>;
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(Block));
    __m256i q = split_nibbles(p + offsetof(Block, qs));
    if constexpr (kFifthBit) q = _mm256_or_si256(q, fifth_bits(p + offsetof(Block, qh)));
    const __m256 d = _mm256_set1_ps(load_half(p));
    const __m256 m = _mm256_set1_ps(load_half(p + 2));
    const __m256 dv[4] = {d, d, d, d};
    const __m256 mv[4] = {m, m, m, m};
    affine32<true>(q, dv, mv, out + b * kGgmlQK);
  }
}

// 16 byte-sized scales times d (exactly the reference's d * float(scale), one rounding), into
// out[0..15]; kSigned for Q3_K's unbiased scales.
template <bool kSigned>
inline void scale16(__m128i sc, float d, float* out) {
  const __m256 dv = _mm256_set1_ps(d);
  const __m128i hi = _mm_srli_si128(sc, 8);
  _mm256_store_ps(out, _mm256_mul_ps(dv, kSigned ? i8_to_ps(sc) : u8_to_ps(sc)));
  _mm256_store_ps(out + 8, _mm256_mul_ps(dv, kSigned ? i8_to_ps(hi) : u8_to_ps(hi)));
}

// Q2_K: per 16 values dl = d * (scale & 15), ml = dmin * (scale >> 4), then dl * q - ml. Value
// 128 * half + 32 * pass + l is the 2-bit field at bit 2 * pass of qs[32 * half + l].
void q2_k(const uint8_t* blocks, float* out, int64_t n) {
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m256i two = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockQ2_K));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    alignas(32) float dl[16], ml[16];
    scale16<false>(_mm_and_si128(sc, nibble), load_half(p + offsetof(GgmlBlockQ2_K, d)), dl);
    scale16<false>(_mm_and_si128(_mm_srli_epi16(sc, 4), nibble),
                   load_half(p + offsetof(GgmlBlockQ2_K, dmin)), ml);
    float* y = out + b * kGgmlQK_K;
    for (int half = 0; half < 2; ++half) {
      const __m256i qs = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(p + offsetof(GgmlBlockQ2_K, qs) + 32 * half));
      for (int pass = 0; pass < 4; ++pass) {
        const int g = 8 * half + 2 * pass;  // the scale of the first 16 of these 32 values
        const __m256 d0 = _mm256_broadcast_ss(dl + g), d1 = _mm256_broadcast_ss(dl + g + 1);
        const __m256 m0 = _mm256_broadcast_ss(ml + g), m1 = _mm256_broadcast_ss(ml + g + 1);
        const __m256 dv[4] = {d0, d0, d1, d1};
        const __m256 mv[4] = {m0, m0, m1, m1};
        affine32(_mm256_and_si256(_mm256_srli_epi16(qs, 2 * pass), two), dv, mv,
                 y + 128 * half + 32 * pass);
      }
    }
  }
}

// Q3_K: dl = d * scale per 16 values, then dl * q with q = field - 4 where the hmask bit is
// clear. Fields are walked as in Q2_K; the hmask bit of value 128 * half + 32 * pass + l is
// bit 4 * half + pass of hmask[l].
void q3_k(const uint8_t* blocks, float* out, int64_t n) {
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m256i two = _mm256_set1_epi8(0x03);
  const __m256i one = _mm256_set1_epi8(0x01);
  const __m256i four = _mm256_set1_epi8(0x04);
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockQ3_K));
    // Scale j: low four bits in nibble j / 8 of byte j % 8, top two at bit 2 * (j / 4) of
    // byte 8 + j % 4: the 32-bit word of bytes 8-11 shifted by 2 * (j / 4) has them in byte
    // j % 4.
    const uint8_t* s = p + offsetof(GgmlBlockQ3_K, scales);
    const __m128i l8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
    const __m128i low =
        _mm_unpacklo_epi64(_mm_and_si128(l8, nibble), _mm_and_si128(_mm_srli_epi16(l8, 4), nibble));
    uint32_t top;
    std::memcpy(&top, s + 8, 4);
    const __m128i w = _mm_set1_epi32(static_cast<int>(top));
    const __m128i high =
        _mm_and_si128(_mm_srlv_epi32(w, _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(0x03));
    const __m128i sc = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
    alignas(32) float dl[16];
    scale16<true>(sc, load_half(p + offsetof(GgmlBlockQ3_K, d)), dl);
    const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    float* y = out + b * kGgmlQK_K;
    for (int half = 0; half < 2; ++half) {
      const __m256i qs = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(p + offsetof(GgmlBlockQ3_K, qs) + 32 * half));
      for (int pass = 0; pass < 4; ++pass) {
        const __m256i field = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * pass), two);
        const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * half + pass), one);
        const __m256i q = _mm256_sub_epi8(_mm256_or_si256(field, _mm256_slli_epi16(bit, 2)), four);
        const int g = 8 * half + 2 * pass;
        const __m256 d0 = _mm256_broadcast_ss(dl + g), d1 = _mm256_broadcast_ss(dl + g + 1);
        const __m256 sv[4] = {d0, d0, d1, d1};
        scaled32(q, sv, y + 128 * half + 32 * pass);
      }
    }
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
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockQ6_K));
    const float d = load_half(p + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(p + 192);
    __m256 ds[16];
    for (int i = 0; i < 16; ++i) ds[i] = _mm256_set1_ps(d * static_cast<float>(scales[i]));
    float* y = out + b * kGgmlQK_K;
    for (int half = 0; half < 2; ++half) {
      __m256i codes[4];
      avx2::q6_k_half_codes(p, half, codes);
      for (int r = 0; r < 4; ++r) {
        const __m256i q = codes[r];
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

// IQ4_NL and IQ4_XS codes: the grid looked up by nibble, in Q4_0's order.
inline __m256i iq4_codes(const uint8_t* qs) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kGgmlIq4Values));
  const __m128i nibble = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, nibble));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), nibble));
  return _mm256_set_m128i(hi, lo);
}

void iq4_nl(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockIq4Nl));
    const __m256 d = _mm256_set1_ps(load_half(p));
    const __m256 s[4] = {d, d, d, d};
    scaled32(iq4_codes(p + 2), s, out + b * kGgmlQK);
  }
}

void iq4_xs(const uint8_t* blocks, float* out, int64_t n) {
  for (int64_t b = 0; b < n / kGgmlQK_K; ++b) {
    const uint8_t* p = blocks + b * static_cast<int64_t>(sizeof(GgmlBlockIq4Xs));
    GgmlBlockIq4Xs blk;
    std::memcpy(&blk, p, sizeof blk);
    const float d = load_half(p);
    for (int j = 0; j < 8; ++j) {
      // (d * scale) first, as the reference rounds it.
      const __m256 dl = _mm256_set1_ps(d * static_cast<float>(iq4_xs_scale(blk, j)));
      const __m256 s[4] = {dl, dl, dl, dl};
      scaled32(iq4_codes(p + 8 + 16 * j), s, out + b * kGgmlQK_K + 32 * j);
    }
  }
}

constexpr GgmlKernels make_avx2_kernels() {
  GgmlKernels k{IsaLevel::kAvx2, {}};
  auto set = [&k](GgmlType t, GgmlDequantFn f) { k.dequant[static_cast<uint32_t>(t)] = f; };
  set(GgmlType::kF32, ref_f32);  // a copy: memcpy is as fast as it gets
  set(GgmlType::kF16, f16);
  set(GgmlType::kBF16, bf16);
  set(GgmlType::kQ4_0, q4_5_0<false>);
  set(GgmlType::kQ4_1, q4_5_1<false>);
  set(GgmlType::kQ5_0, q4_5_0<true>);
  set(GgmlType::kQ5_1, q4_5_1<true>);
  set(GgmlType::kQ8_0, q8_0);
  set(GgmlType::kQ2_K, q2_k);
  set(GgmlType::kQ3_K, q3_k);
  set(GgmlType::kQ4_K, k4<false>);
  set(GgmlType::kQ5_K, k4<true>);
  set(GgmlType::kQ6_K, q6_k);
  set(GgmlType::kMXFP4, mxfp4);
  set(GgmlType::kIQ4_NL, iq4_nl);
  set(GgmlType::kIQ4_XS, iq4_xs);
  return k;
}

}  // namespace

constinit const GgmlKernels kAvx2Ggml = make_avx2_kernels();

}  // namespace mx::ggml_detail
