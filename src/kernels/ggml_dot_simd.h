// The integer dot products of ggml_dot.h on 256-bit vectors, written once for the AVX2 and
// AVX-512 tables: each includes this file in its own translation unit, built with its own
// flags. Where AVX-512 VNNI is enabled, unsigned-by-signed byte products with no per-group
// integer scale accumulate with vpdpbusd; elsewhere with vpmaddubsw + vpmaddwd.
//
// A kernel computes one weight row against R activation rows (R = 1..4): each weight block
// is unpacked once into bytes and serves every row. Weights the format stores unsigned stay
// so (Q4_1, Q5_1, the K-quants); Q3_K's and Q6_K's offsets enter each block's integer sum
// through the activations' sums of 16. Signed weights (Q4_0, Q5_0, Q8_0, MXFP4, IQ4_NL,
// IQ4_XS) go through the sign trick: |w| times x with w's sign. A constant offset is never
// taken back through a separate FP32 term, which would cancel catastrophically when one
// block's activations dwarf the rest. Integer sums are exact: vpmaddubsw's pairs stay below
// 2^15 for every weight range used here (at most 63 * 127 * 2, or 128 * 127 * 2).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "formats/ggml_types.h"
#include "kernels/ggml_dot.h"

namespace mx::ggml_dot_detail {
namespace {

// Activation rows per kernel call: four in 256-bit kernels (sixteen vector registers under
// AVX2); the AVX-512 table runs eight (32 registers), each weight block unpacked once for all.
constexpr int kMaxRows = 4;
constexpr int kMaxRows512 = 8;

inline float fp16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Sum of adjacent unsigned-by-signed byte products, four per int32 lane.
inline __m256i dot_us(__m256i w, __m256i x) {
#if defined(__AVX512VNNI__)
  return _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
#endif
}
inline __m256i dot_us_acc(__m256i acc, __m256i w, __m256i x) {
#if defined(__AVX512VNNI__)
  return _mm256_dpbusd_epi32(acc, w, x);
#else
  return _mm256_add_epi32(acc, dot_us(w, x));
#endif
}
// Pairs of unsigned-by-signed byte products times int16 scales (one per 16-bit lane pair).
inline __m256i dot_us_scaled(__m256i w, __m256i x, __m256i scale16) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), scale16);
}

// 32 nibbles of 16 bytes in Q4_0's order: byte j's low nibble is value j, its high one j + 16.
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = load128(qs);
  const __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

// 0xFF in byte j where bit j of `bits` is set.
inline __m256i bytes_from_bits(uint32_t bits) {
  const __m256i shuf =
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i t = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  return _mm256_cmpeq_epi8(_mm256_and_si256(t, mask), mask);
}

inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

// ---- 32-value block types: y = sum_b (scale_b * dx_b * isum_b + coef_b * s_b) ----

// Each format: bytes per block, its 32 codes as bytes in value order, whether they are
// signed, the block's scale, and the coefficient of the activations' s (d * sum of codes):
// the min of Q4_1 and Q5_1, a term of its own in the format.
struct Q4_0Fmt {
  static constexpr int64_t kBytes = 18;
  static constexpr bool kSigned = true;
  static __m256i codes(const uint8_t* b) {
    return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
  }
  static float scale(const uint8_t* b) { return fp16_at(b); }
  static float coef(const uint8_t*) { return 0.0f; }
};
struct Q4_1Fmt {
  static constexpr int64_t kBytes = 20;
  static constexpr bool kSigned = false;
  static __m256i codes(const uint8_t* b) { return nibbles32(b + 4); }
  static float scale(const uint8_t* b) { return fp16_at(b); }
  static float coef(const uint8_t* b) { return fp16_at(b + 2); }
};
inline __m256i q5_codes(const uint8_t* qh, const uint8_t* qs) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  const __m256i high = _mm256_and_si256(bytes_from_bits(h), _mm256_set1_epi8(0x10));
  return _mm256_or_si256(nibbles32(qs), high);
}
struct Q5_0Fmt {
  static constexpr int64_t kBytes = 22;
  static constexpr bool kSigned = true;
  static __m256i codes(const uint8_t* b) {
    return _mm256_sub_epi8(q5_codes(b + 2, b + 6), _mm256_set1_epi8(16));
  }
  static float scale(const uint8_t* b) { return fp16_at(b); }
  static float coef(const uint8_t*) { return 0.0f; }
};
struct Q5_1Fmt {
  static constexpr int64_t kBytes = 24;
  static constexpr bool kSigned = false;
  static __m256i codes(const uint8_t* b) { return q5_codes(b + 4, b + 8); }
  static float scale(const uint8_t* b) { return fp16_at(b); }
  static float coef(const uint8_t* b) { return fp16_at(b + 2); }
};
struct Q8_0Fmt {
  static constexpr int64_t kBytes = 34;
  static constexpr bool kSigned = true;
  static __m256i codes(const uint8_t* b) { return load256(b + 2); }
  static float scale(const uint8_t* b) { return fp16_at(b); }
  static float coef(const uint8_t*) { return 0.0f; }
};
struct Iq4NlFmt {
  static constexpr int64_t kBytes = 18;
  static constexpr bool kSigned = true;
  static __m256i codes(const uint8_t* b) {
    const __m256i grid = _mm256_broadcastsi128_si256(load128(kGgmlIq4Values));
    return _mm256_shuffle_epi8(grid, nibbles32(b + 2));
  }
  static float scale(const uint8_t* b) { return fp16_at(b); }
  static float coef(const uint8_t*) { return 0.0f; }
};
// MXFP4's doubled E2M1 grid (code 8 is +0, as ggml decodes it).
alignas(16) constexpr int8_t kMxfp4Doubled[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                                  0, -1, -2, -3, -4, -6, -8, -12};
struct Mxfp4Fmt {
  static constexpr int64_t kBytes = 17;
  static constexpr bool kSigned = true;
  static __m256i codes(const uint8_t* b) {
    const __m256i grid = _mm256_broadcastsi128_si256(load128(kMxfp4Doubled));
    return _mm256_shuffle_epi8(grid, nibbles32(b + 1));
  }
  static float scale(const uint8_t* b) { return e8m0_half(b[0]); }
  static float coef(const uint8_t*) { return 0.0f; }
};

template <class F, int R>
void dot32(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  __m256 acc[R];
  float off[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    off[r] = 0.0f;
  }
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* blk = w + b * F::kBytes;
    __m256i q = F::codes(blk);
    __m256i sign = q;
    if constexpr (F::kSigned) q = _mm256_sign_epi8(q, q);
    const float d = F::scale(blk);
    const float c = F::coef(blk);
    for (int r = 0; r < R; ++r) {
      __m256i xv = load256(x[r].codes + 32 * b);
      if constexpr (F::kSigned) xv = _mm256_sign_epi8(xv, sign);
      const __m256 p = _mm256_cvtepi32_ps(dot_us(q, xv));
      acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * x[r].d[b]), p, acc[r]);
      off[r] += c * x[r].s[b];
    }
    (void)sign;
  }
  for (int r = 0; r < R; ++r) out[r] = hsum(acc[r]) + off[r];
}

// ---- Super-blocks of 256 (Q8_K activations) ----

// Sixteen int16 scales, one per 16 values, broadcast over the two halves of 32 values.
inline __m256i scale_pair(int a, int b) {
  return _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(b)),
                          _mm_set1_epi16(static_cast<int16_t>(a)));
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// A super-block's per-row integer sums and its closing: y += d * dx * isum - dmin * dx * msum.
// The lanes are added as integers first: an offset that madd places in other lanes than the
// products it corrects (Q3_K's -4, Q6_K's -32) cancels there exactly, not in FP32 (where it
// cost up to 2e-5 of the result).
template <int R>
struct SuperAcc {
  float acc[R], accm[R];
  SuperAcc() {
    for (int r = 0; r < R; ++r) acc[r] = accm[r] = 0.0f;
  }
  void add(int r, float d, __m256i isum) {
    acc[r] = __builtin_fmaf(d, static_cast<float>(hsum_epi32(isum)), acc[r]);
  }
  void sub(int r, float dmin, __m256i msum) {
    accm[r] = __builtin_fmaf(dmin, static_cast<float>(hsum_epi32(msum)), accm[r]);
  }
  void finish(float* out) const {
    for (int r = 0; r < R; ++r) out[r] = acc[r] - accm[r];
  }
};

inline __m256i sums16(const ActRowView& x, int64_t b) { return load256(x.sums + 16 * b); }

// The eight six-bit scales and mins of a Q4_K / Q5_K super-block (ggml_detail::
// unpack_k4_scales), byte j of *sc and *m for sub-block j, computed in registers: bytes
// stored one by one and read back as a vector would stall on store forwarding.
inline void k4_scales(const uint8_t* s, uint64_t* sc, uint64_t* m) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  const uint32_t sc_hi = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  const uint32_t m_hi = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
  *sc = (a & 0x3F3F3F3Fu) | (uint64_t{sc_hi} << 32);
  *m = (b & 0x3F3F3F3Fu) | (uint64_t{m_hi} << 32);
}
inline int byte_of(uint64_t v, int j) { return static_cast<int>((v >> (8 * j)) & 0xFF); }

// Q4_K and Q5_K: eight 32-value sub-blocks with six-bit scales and mins.
template <bool kFive, int R>
void dot_k4(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  constexpr int64_t kBytes = kFive ? 176 : 144;
  SuperAcc<R> s;
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + b * kBytes;
    const float d = fp16_at(blk), dmin = fp16_at(blk + 2);
    uint64_t sc, m;
    k4_scales(blk + 4, &sc, &m);
    const __m128i m8 = _mm_cvtsi64_si128(static_cast<int64_t>(m));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
    const uint8_t* qs = blk + (kFive ? 48 : 16);
    const __m256i qh = kFive ? load256(blk + 16) : _mm256_setzero_si256();
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i q = load256(qs + 32 * c);
      __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(0x0F));
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(0x0F));
      if constexpr (kFive) {
        const __m256i bl = _mm256_set1_epi8(static_cast<char>(1 << (2 * c)));
        const __m256i bh = _mm256_set1_epi8(static_cast<char>(1 << (2 * c + 1)));
        const __m256i sixteen = _mm256_set1_epi8(16);
        lo = _mm256_or_si256(
            lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bl), bl), sixteen));
        hi = _mm256_or_si256(
            hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bh), bh), sixteen));
      }
      const __m256i s0 = _mm256_set1_epi16(static_cast<int16_t>(byte_of(sc, 2 * c)));
      const __m256i s1 = _mm256_set1_epi16(static_cast<int16_t>(byte_of(sc, 2 * c + 1)));
      for (int r = 0; r < R; ++r) {
        const int8_t* xc = x[r].codes + 256 * b + 64 * c;
        isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(lo, load256(xc), s0));
        isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(hi, load256(xc + 32), s1));
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dx = x[r].d[b];
      s.add(r, d * dx, isum[r]);
      s.sub(r, dmin * dx, _mm256_madd_epi16(sums16(x[r], b), mins));
    }
  }
  s.finish(out);
}

// Q6_K: 16 signed scales per super-block; codes 0..63 stand for -32..31.
template <int R>
void dot_q6_k(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  SuperAcc<R> s;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + b * 210;
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = fp16_at(blk + 208);
    const __m256i sc16 = _mm256_cvtepi8_epi16(load128(sc));
    __m256i isum[R];
    for (int r = 0; r < R; ++r) {
      // The -32 of every code, through the activations' sums of 16.
      isum[r] = _mm256_slli_epi32(_mm256_madd_epi16(sums16(x[r], b), sc16), 5);
      isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), isum[r]);
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load256(blk + 64 * h), l1 = load256(blk + 64 * h + 32);
      const __m256i qh = load256(blk + 128 + 32 * h);
      __m256i q[4];
      q[0] =
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
      for (int p = 0; p < 4; ++p) {
        const int g = 8 * h + 2 * p;
        const __m256i scale = scale_pair(sc[g], sc[g + 1]);
        for (int r = 0; r < R; ++r) {
          const __m256i xv = load256(x[r].codes + 256 * b + 128 * h + 32 * p);
          isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(q[p], xv, scale));
        }
      }
    }
    for (int r = 0; r < R; ++r) s.add(r, d * x[r].d[b], isum[r]);
  }
  s.finish(out);
}

// Q2_K and Q3_K: two halves of 128 values read four times (2-bit fields at shifts 0, 2, 4,
// 6 of 32 bytes), a scale per 16 values. Q2_K: value d * sc * q - dmin * m; Q3_K: d * sc *
// (q + 4 * hbit - 4).
template <bool kThree, int R>
void dot_k23(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  constexpr int64_t kBytes = kThree ? 110 : 84;
  SuperAcc<R> s;
  const __m256i m3 = _mm256_set1_epi8(0x03);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + b * kBytes;
    int sc[16];
    __m256i mins = _mm256_setzero_si256();
    float d, dmin = 0.0f;
    const uint8_t* qs;
    if constexpr (kThree) {
      d = fp16_at(blk + 108);
      const uint8_t* p = blk + 96;
      for (int j = 0; j < 16; ++j) {
        const int low = j < 8 ? p[j] & 0xF : p[j - 8] >> 4;
        const int high = (p[8 + j % 4] >> (2 * (j / 4))) & 3;
        sc[j] = (low | (high << 4)) - 32;
      }
      qs = blk + 32;
    } else {
      d = fp16_at(blk + 80);
      dmin = fp16_at(blk + 82);
      const __m128i raw = load128(blk);
      mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
      for (int j = 0; j < 16; ++j) sc[j] = blk[j] & 0xF;
      qs = blk + 16;
    }
    alignas(32) int16_t sc16a[16];
    for (int j = 0; j < 16; ++j) sc16a[j] = static_cast<int16_t>(sc[j]);
    const __m256i sc16 = load256(sc16a);
    const __m256i hm = kThree ? load256(blk) : _mm256_setzero_si256();
    __m256i isum[R];
    for (int r = 0; r < R; ++r) {
      if constexpr (kThree) {  // the -4 of every code
        isum[r] = _mm256_slli_epi32(_mm256_madd_epi16(sums16(x[r], b), sc16), 2);
        isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), isum[r]);
      } else {
        isum[r] = _mm256_setzero_si256();
      }
    }
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(qs + 32 * h);
      for (int p = 0; p < 4; ++p) {
        __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
        if constexpr (kThree) {
          const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * h + p)));
          const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
          v = _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(4)));
        }
        const int g = 8 * h + 2 * p;
        const __m256i scale = scale_pair(sc[g], sc[g + 1]);
        for (int r = 0; r < R; ++r) {
          const __m256i xv = load256(x[r].codes + 256 * b + 128 * h + 32 * p);
          isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(v, xv, scale));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dx = x[r].d[b];
      s.add(r, d * dx, isum[r]);
      if constexpr (!kThree) s.sub(r, dmin * dx, _mm256_madd_epi16(sums16(x[r], b), mins));
    }
  }
  s.finish(out);
}

// IQ4_XS: eight 32-value sub-blocks of the IQ4_NL grid, six-bit scales biased by 32.
template <int R>
void dot_iq4_xs(const uint8_t* w, const ActRowView* x, int64_t k, float* out) {
  SuperAcc<R> s;
  const __m256i grid = _mm256_broadcastsi128_si256(load128(kGgmlIq4Values));
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = w + b * 136;
    const float d = fp16_at(blk);
    uint16_t sh;
    std::memcpy(&sh, blk + 2, 2);
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const int ls =
          (((blk[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((sh >> (2 * j)) & 3) << 4)) - 32;
      const __m256i q = _mm256_shuffle_epi8(grid, nibbles32(blk + 8 + 16 * j));
      const __m256i aq = _mm256_sign_epi8(q, q);
      const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(ls));
      for (int r = 0; r < R; ++r) {
        const __m256i xv = _mm256_sign_epi8(load256(x[r].codes + 256 * b + 32 * j), q);
        isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(aq, xv, scale));
      }
    }
    for (int r = 0; r < R; ++r) s.add(r, d * x[r].d[b], isum[r]);
  }
  s.finish(out);
}

using RowDot = void (*)(const uint8_t* w, const ActRowView* x, int64_t k, float* out);

template <int R>
RowDot row_dot(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0:
      return dot32<Q4_0Fmt, R>;
    case GgmlType::kQ4_1:
      return dot32<Q4_1Fmt, R>;
    case GgmlType::kQ5_0:
      return dot32<Q5_0Fmt, R>;
    case GgmlType::kQ5_1:
      return dot32<Q5_1Fmt, R>;
    case GgmlType::kQ8_0:
      return dot32<Q8_0Fmt, R>;
    case GgmlType::kIQ4_NL:
      return dot32<Iq4NlFmt, R>;
    case GgmlType::kMXFP4:
      return dot32<Mxfp4Fmt, R>;
    case GgmlType::kQ2_K:
      return dot_k23<false, R>;
    case GgmlType::kQ3_K:
      return dot_k23<true, R>;
    case GgmlType::kQ4_K:
      return dot_k4<false, R>;
    case GgmlType::kQ5_K:
      return dot_k4<true, R>;
    case GgmlType::kQ6_K:
      return dot_q6_k<R>;
    case GgmlType::kIQ4_XS:
      return dot_iq4_xs<R>;
    default:
      return nullptr;
  }
}

// The GEMM over one table's row kernels: fns[R - 1] takes R activation rows at a time, R up to
// MaxR.
template <int MaxR>
void gemm_rows(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end, const RowDot* fns) {
  const GgmlActType at = ggml_act_type(a.type);
  for (int64_t i0 = 0; i0 < a.m; i0 += MaxR) {
    const int rows = static_cast<int>(std::min<int64_t>(MaxR, a.m - i0));
    ActRowView x[MaxR];
    for (int r = 0; r < rows; ++r) x[r] = act_row_view(at, a.xq + (i0 + r) * a.xq_stride, a.k);
    const RowDot fn = fns[rows - 1];
    for (int64_t n = n_begin; n < n_end; ++n) {
      float out[MaxR];
      fn(a.w + n * a.row_bytes, x, a.k, out);
      for (int r = 0; r < rows; ++r) a.y[(i0 + r) * a.ldy + n] = out[r];
    }
  }
}

[[maybe_unused]] void gemm_simd(const GgmlDotArgs& a, int64_t n_begin, int64_t n_end) {
  const RowDot fns[kMaxRows] = {row_dot<1>(a.type), row_dot<2>(a.type), row_dot<3>(a.type),
                                row_dot<4>(a.type)};
  gemm_rows<kMaxRows>(a, n_begin, n_end, fns);
}

// ---- Activation quantizers: the scalar reference's operations, eight lanes at a time ----

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
inline float hmin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}
// round(x * s) half to even, as int32 lanes.
inline __m256i round_scaled(const float* x, __m256 s) {
  const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x), s);
  return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// 32 int32 lanes (four vectors, value order) into 32 int8s; every value fits.
inline __m256i pack32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
  const __m256i p = _mm256_packs_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

void quantize_simd_q8_0(const float* x, int64_t k, uint8_t* row) {
  auto* codes = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + k);
  float* s = d + k / 32;
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* xb = x + 32 * b;
    __m256 m = abs_ps(_mm256_loadu_ps(xb));
    for (int j = 8; j < 32; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(xb + j)));
    const float amax = hmax(m);
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const __m256i q0 = round_scaled(xb, id), q1 = round_scaled(xb + 8, id);
    const __m256i q2 = round_scaled(xb + 16, id), q3 = round_scaled(xb + 24, id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 32 * b), pack32(q0, q1, q2, q3));
    const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
    d[b] = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    s[b] = d[b] * static_cast<float>(sum);
  }
}

void quantize_simd_q8_k(const float* x, int64_t k, uint8_t* row) {
  auto* codes = reinterpret_cast<int8_t*>(row);
  auto* d = reinterpret_cast<float*>(row + k);
  auto* sums = reinterpret_cast<int16_t*>(d + k / 256);
  for (int64_t b = 0; b < k / 256; ++b) {
    const float* xb = x + 256 * b;
    __m256 hi = _mm256_setzero_ps(), lo = _mm256_setzero_ps();
    for (int j = 0; j < 256; j += 8) {
      const __m256 v = _mm256_loadu_ps(xb + j);
      hi = _mm256_max_ps(hi, v);
      lo = _mm256_min_ps(lo, v);
    }
    const float h = hmax(hi), l = hmin(lo);
    const float v = h >= -l ? h : l;
    const float iscale = v != 0.0f ? -127.0f / v : 0.0f;
    const __m256 is = _mm256_set1_ps(iscale);
    const __m256i cap = _mm256_set1_epi32(127);
    for (int g = 0; g < 256; g += 32) {
      const __m256i q0 = _mm256_min_epi32(round_scaled(xb + g, is), cap);
      const __m256i q1 = _mm256_min_epi32(round_scaled(xb + g + 8, is), cap);
      const __m256i q2 = _mm256_min_epi32(round_scaled(xb + g + 16, is), cap);
      const __m256i q3 = _mm256_min_epi32(round_scaled(xb + g + 24, is), cap);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 256 * b + g), pack32(q0, q1, q2, q3));
      sums[16 * b + g / 16] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q0, q1)));
      sums[16 * b + g / 16 + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(q2, q3)));
    }
    d[b] = v != 0.0f ? 1.0f / iscale : 0.0f;
  }
}

[[maybe_unused]] void quantize_simd(GgmlActType a, const float* x, int64_t k, uint8_t* row) {
  if (a == GgmlActType::kQ8_0) {
    quantize_simd_q8_0(x, k, row);
  } else {
    quantize_simd_q8_k(x, k, row);
  }
}

}  // namespace
}  // namespace mx::ggml_dot_detail
