// AVX2 GEMM over ggml blocks (ggml_gemm.h): kGgmlGemmRows weight rows at a time are
// dequantized by the AVX2 dequantizers (bit for bit the reference's values) into the L1
// scratch, then every activation row takes its dots with those rows in FMA chains (F32 rows
// are read in place for small m). For decode (m == 1) of every other type, and for small
// batches of the block types, the weights are dequantized in registers (or through a block's
// worth of int8 codes in L1) instead, by the same FP32 operations, and go straight into the
// chains of every activation row of the batch.
//
// Every output sees one fixed sequence of operations, whatever m, the row's place in the
// batch, the column range or the path: element j < 8 * floor(k / 8) goes to lane j % 8 of
// chain (j / 8) % 2, the masked tail of k % 8 to chain 0; then chain 0 + chain 1, and the
// eight lanes summed in the hadd tree of hsum4. Register tiles only choose which outputs
// share the loads.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "formats/ggml_avx2.h"
#include "kernels/ggml_gemm.h"

namespace mx::ggml_gemm_detail {
namespace {

// Lanes [0, n) of the tail mask start at kTailMask + 8 - n.
alignas(32) constexpr int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                               0,  0,  0,  0,  0,  0,  0,  0};

inline __m256i tail_mask(int64_t n) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - n));
}

// The lane sums of four vectors, in lanes 0..3 of the result.
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// The outputs of MR activation rows by R weight rows: chain 0 + chain 1, then hsum4, into
// y[i * ldy + r].
template <int MR, int R>
inline void store_dots(const __m256 (&acc)[MR][R][2], float* y, int64_t ldy) {
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) s[r] = _mm256_add_ps(acc[i][r][0], acc[i][r][1]);
    const __m128 v = hsum4(s[0], s[1], s[2], s[3]);
    if constexpr (R == 4) {
      _mm_storeu_ps(y + i * ldy, v);
    } else {
      alignas(16) float t[4];
      _mm_store_ps(t, v);
      std::copy(t, t + R, y + i * ldy);
    }
  }
}

// MR activation rows (stride ldx) by R dequantized weight rows (stride k), two chains per
// dot: at most eight accumulators for the shapes used (MR * R <= 4). y[i * ldy + r]
// receives the dot of activation row i with weight row r.
template <int MR, int R>
void dots(const float* x, int64_t ldx, const float* w, int64_t k, float* y, int64_t ldy) {
  __m256 acc[MR][R][2];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[i][r][0] = acc[i][r][1] = _mm256_setzero_ps();
  }
  int64_t j = 0;
  for (; j + 16 <= k; j += 16) {
    __m256 xv[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      xv[i][0] = _mm256_loadu_ps(x + i * ldx + j);
      xv[i][1] = _mm256_loadu_ps(x + i * ldx + j + 8);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
      for (int u = 0; u < 2; ++u) {
        const __m256 wv = _mm256_loadu_ps(w + r * k + j + 8 * u);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) acc[i][r][u] = _mm256_fmadd_ps(xv[i][u], wv, acc[i][r][u]);
      }
    }
  }
  if (j + 8 <= k) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_loadu_ps(x + i * ldx + j);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[i][r][0] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w + r * k + j), acc[i][r][0]);
      }
    }
    j += 8;
  }
  if (j < k) {
    const __m256i mask = tail_mask(k - j);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m256 xv = _mm256_maskload_ps(x + i * ldx + j, mask);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        acc[i][r][0] = _mm256_fmadd_ps(xv, _mm256_maskload_ps(w + r * k + j, mask), acc[i][r][0]);
      }
    }
  }
  store_dots<MR, R>(acc, y, ldy);
}

// Every activation row against R (1..4) dequantized rows. A lone row takes all R at once
// (the eight chains hide FMA latency); pairs of rows take the weight rows two at a time, so
// that each loaded weight vector feeds two FMAs and the accumulators still fit.
template <int R>
void rows_against(const GgmlGemmArgs& a, const float* w, int64_t n0) {
  int64_t i = 0;
  for (; i + 2 <= a.m; i += 2) {
    const float* x = a.x + i * a.ldx;
    float* y = a.y + i * a.ldy + n0;
    dots<2, std::min(R, 2)>(x, a.ldx, w, a.k, y, a.ldy);
    if constexpr (R > 2) dots<2, R - 2>(x, a.ldx, w + 2 * a.k, a.k, y + 2, a.ldy);
  }
  if (i < a.m) dots<1, R>(a.x + i * a.ldx, a.ldx, w, a.k, a.y + i * a.ldy + n0, a.ldy);
}

// Decode (m == 1) of Q8_0 and Q4_K: each weight is dequantized in registers by the
// reference's FP32 operations and goes straight into its FMA chain in the element order of
// dots(), so the outputs are those of the scratch path bit for bit, without the dequantized
// rows passing through memory: about twice as fast as the scratch path at n = k = 2048.

// FP16 scale bits as formats/half.h decodes them: F16C agrees except on NaN payloads.
inline float half_scale(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  if ((h & 0x7C00u) == 0x7C00u && (h & 0x03FFu) != 0) {
    return std::bit_cast<float>((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7FC00000u);
  }
  return _cvtsh_ss(h);
}

// Eight bytes from p, sign- or zero-extended to 32 bits (one load-and-extend instruction).
inline __m256i load8_i8(const uint8_t* p) {
  return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}
inline __m256i load8_u8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

template <int R>
void q8_0_decode(const GgmlGemmArgs& a, int64_t n0) {
  constexpr int64_t kBytes = sizeof(GgmlBlockQ8_0);
  const uint8_t* w = a.w + n0 * a.row_bytes;
  __m256 acc[1][R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[0][r][0] = acc[0][r][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.k / kGgmlQK; ++b) {
    __m256 xv[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) xv[v] = _mm256_loadu_ps(a.x + b * kGgmlQK + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = w + r * a.row_bytes + b * kBytes;
      const __m256 d = _mm256_set1_ps(half_scale(blk + offsetof(GgmlBlockQ8_0, d)));
      const uint8_t* q = blk + offsetof(GgmlBlockQ8_0, qs);
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m256 wv = _mm256_mul_ps(_mm256_cvtepi32_ps(load8_i8(q + 8 * v)), d);
        acc[0][r][v % 2] = _mm256_fmadd_ps(xv[v], wv, acc[0][r][v % 2]);
      }
    }
  }
  store_dots<1, R>(acc, a.y + n0, a.ldy);
}

// Q4_K's eight scales and eight mins of a super-block (six bits each) times d and dmin, into
// ds[0..7] and ms[0..7]. In 32-bit words of its 12 scale bytes A, B, C, byte lane l holds:
// scale l = A & 63 and min l = B & 63; scale l + 4 = C & 15 | (A >> 6) << 4 and min l + 4 =
// C >> 4 | (B >> 6) << 4 (ggml's get_scale_min_k4).
inline void q4_k_scales(const uint8_t* blk, float* ds, float* ms) {
  uint32_t abc[3];
  std::memcpy(abc, blk + offsetof(GgmlBlockQ4_K, scales), sizeof abc);
  const uint32_t low6 = 0x3F3F3F3Fu, low4 = 0x0F0F0F0Fu, low2 = 0x03030303u;
  const uint32_t sc_hi = (abc[2] & low4) | (((abc[0] >> 6) & low2) << 4);
  const uint32_t m_hi = ((abc[2] >> 4) & low4) | (((abc[1] >> 6) & low2) << 4);
  const uint64_t sc = (abc[0] & low6) | (static_cast<uint64_t>(sc_hi) << 32);
  const uint64_t m = (abc[1] & low6) | (static_cast<uint64_t>(m_hi) << 32);
  const auto widen = [](uint64_t bytes) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(bytes))));
  };
  // Exact products (11 by 6 significant bits), those of the reference.
  const __m256 d = _mm256_set1_ps(half_scale(blk + offsetof(GgmlBlockQ4_K, d)));
  const __m256 dmin = _mm256_set1_ps(half_scale(blk + offsetof(GgmlBlockQ4_K, dmin)));
  _mm256_store_ps(ds, _mm256_mul_ps(d, widen(sc)));
  _mm256_store_ps(ms, _mm256_mul_ps(dmin, widen(m)));
}

// Sub-block s of a Q4_K super-block against x (its 32 activations): the low nibbles of the
// 32 bytes q for even s, the high ones for odd s.
template <int R, bool kHigh>
inline void q4_k_sub_block(const float* x, const uint8_t* const (&q)[R], const float (&ds)[R][8],
                           const float (&ms)[R][8], int s, __m256 (&acc)[1][R][2]) {
  const __m256i low4 = _mm256_set1_epi32(0x0F);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256 dv = _mm256_set1_ps(ds[r][s]);
    const __m256 mv = _mm256_set1_ps(ms[r][s]);
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) {
      const __m256i z = load8_u8(q[r] + 8 * v);
      const __m256i nib = kHigh ? _mm256_srli_epi32(z, 4) : _mm256_and_si256(z, low4);
      // d * sc * q has at most 21 significant bits: exact, so that only the subtraction
      // rounds, as in the reference, whether or not the compiler contracts the two.
      const __m256 wv = _mm256_sub_ps(_mm256_mul_ps(dv, _mm256_cvtepi32_ps(nib)), mv);
      acc[0][r][v % 2] = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8 * v), wv, acc[0][r][v % 2]);
    }
  }
}

template <int R>
void q4_k_decode(const GgmlGemmArgs& a, int64_t n0) {
  constexpr int64_t kBytes = sizeof(GgmlBlockQ4_K);
  const uint8_t* w = a.w + n0 * a.row_bytes;
  __m256 acc[1][R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[0][r][0] = acc[0][r][1] = _mm256_setzero_ps();
  for (int64_t b = 0; b < a.k / kGgmlQK_K; ++b) {
    alignas(32) float ds[R][8], ms[R][8];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) q4_k_scales(w + r * a.row_bytes + b * kBytes, ds[r], ms[r]);
    const float* x = a.x + b * kGgmlQK_K;
    for (int g = 0; g < 4; ++g) {  // sub-blocks 2g and 2g + 1 share the 32 bytes g
      const uint8_t* q[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        q[r] = w + r * a.row_bytes + b * kBytes + offsetof(GgmlBlockQ4_K, qs) + 32 * g;
      }
      q4_k_sub_block<R, false>(x + 64 * g, q, ds, ms, 2 * g, acc);
      q4_k_sub_block<R, true>(x + 64 * g + 32, q, ds, ms, 2 * g + 1, acc);
    }
  }
  store_dots<1, R>(acc, a.y + n0, a.ldy);
}

// The other block types share one fused kernel. A codec unpacks a block into its codes, as
// int8 in element order, and its FP32 scales (and mins) per kGroup values, computed by the
// reference's FP32 operations; then weight j is d * q_j (kMin == 0), d * q_j - m (kMin < 0)
// or d * q_j + m (kMin > 0). Where a min is applied, d * q_j is exact (at most 11 + 6 + 5
// significant bits, never subnormal: FP16 scales are FP32 normals), so a contraction of the
// two into one FMA rounds as the reference does.
inline __m256i split_nibbles(const uint8_t* qs) {  // element j low nibble, j + 16 high
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low4), _mm_and_si128(q, low4));
}

// Byte j = 0x10 where bit j of the little-endian 32-bit qh is set (Q5_0, Q5_1).
inline __m256i fifth_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  const __m256i spread =
      _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                           2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

inline void store32(int8_t* q, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(q), v); }

// 16 byte scales times d, as the reference's d * float(scale).
template <bool kSigned>
inline void scale16(__m128i sc, float d, float* out) {
  const __m256 dv = _mm256_set1_ps(d);
  const __m128i hi = _mm_srli_si128(sc, 8);
  const auto widen = [](__m128i v) {
    return _mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v));
  };
  _mm256_store_ps(out, _mm256_mul_ps(dv, widen(sc)));
  _mm256_store_ps(out + 8, _mm256_mul_ps(dv, widen(hi)));
}

// Q4_0, Q5_0 (kMin 0, codes q - bias) and Q4_1, Q5_1 (kMin 1).
template <bool kFifthBit, bool kOffset>
struct Codec32 {
  using Block =
      std::conditional_t<kFifthBit, std::conditional_t<kOffset, GgmlBlockQ5_1, GgmlBlockQ5_0>,
                         std::conditional_t<kOffset, GgmlBlockQ4_1, GgmlBlockQ4_0>>;
  static constexpr int64_t kBlock = kGgmlQK, kBytes = sizeof(Block);
  static constexpr int kGroup = 32, kMin = kOffset ? 1 : 0;
  static void unpack(const uint8_t* p, int8_t* q, float* d, float* m) {
    __m256i v = split_nibbles(p + offsetof(Block, qs));
    if constexpr (kFifthBit) v = _mm256_or_si256(v, fifth_bits(p + offsetof(Block, qh)));
    if constexpr (!kOffset) v = _mm256_sub_epi8(v, _mm256_set1_epi8(kFifthBit ? 16 : 8));
    store32(q, v);
    d[0] = half_scale(p);
    if constexpr (kOffset) m[0] = half_scale(p + 2);
  }
};

// Q8_0 and Q4_K keep their own m == 1 kernels above; these codecs serve them for 2 <= m.
struct CodecQ8_0 {
  static constexpr int64_t kBlock = kGgmlQK, kBytes = sizeof(GgmlBlockQ8_0);
  static constexpr int kGroup = 32, kMin = 0;
  static void unpack(const uint8_t* p, int8_t* q, float* d, float*) {
    store32(q, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2)));
    d[0] = half_scale(p);
  }
};

struct CodecQ4K {
  static constexpr int64_t kBlock = kGgmlQK_K, kBytes = sizeof(GgmlBlockQ4_K);
  static constexpr int kGroup = 32, kMin = -1;
  static void unpack(const uint8_t* p, int8_t* q, float* d, float* m) {
    q4_k_scales(p, d, m);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int g = 0; g < 4; ++g) {  // sub-blocks 2g (low nibbles) and 2g + 1 (high)
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16 + 32 * g));
      store32(q + 64 * g, _mm256_and_si256(v, low4));
      store32(q + 64 * g + 32, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
    }
  }
};

struct CodecMxfp4 {
  static constexpr int64_t kBlock = kGgmlQK, kBytes = sizeof(GgmlBlockMxfp4);
  static constexpr int kGroup = 32, kMin = 0;
  static void unpack(const uint8_t* p, int8_t* q, float* d, float*) {
    // Twice the E2M1 values, by code; d = 2^(e - 128) (FP32 subnormals for e = 0 and 1).
    const __m256i table = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                           0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    store32(q, _mm256_shuffle_epi8(table, split_nibbles(p + 1)));
    const uint32_t e = p[0];
    d[0] = std::bit_cast<float>(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  }
};

struct CodecQ5K {
  static constexpr int64_t kBlock = kGgmlQK_K, kBytes = sizeof(GgmlBlockQ5_K);
  static constexpr int kGroup = 32, kMin = -1;
  static void unpack(const uint8_t* p, int8_t* q, float* d, float* m) {
    static_assert(offsetof(GgmlBlockQ5_K, scales) == offsetof(GgmlBlockQ4_K, scales));
    q4_k_scales(p, d, m);  // the same d, dmin and scale packing as Q4_K
    const __m256i low4 = _mm256_set1_epi8(0x0F), bit = _mm256_set1_epi8(0x10);
    __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
    for (int g = 0; g < 4; ++g) {  // sub-blocks 2g, 2g + 1: bits 2g, 2g + 1 of qh
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 48 + 32 * g));
      store32(q + 64 * g, _mm256_or_si256(_mm256_and_si256(v, low4),
                                          _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit)));
      store32(q + 64 * g + 32, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), low4),
                                               _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit)));
      qh = _mm256_srli_epi16(qh, 2);
    }
  }
};

struct CodecQ6K {
  static constexpr int64_t kBlock = kGgmlQK_K, kBytes = sizeof(GgmlBlockQ6_K);
  static constexpr int kGroup = 16, kMin = 0;
  static void unpack(const uint8_t* p, int8_t* q, float* d, float*) {
    scale16<true>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192)), half_scale(p + 208),
                  d);
    for (int half = 0; half < 2; ++half) {
      __m256i codes[4];
      avx2::q6_k_half_codes(p, half, codes);
      for (int r = 0; r < 4; ++r) store32(q + 128 * half + 32 * r, codes[r]);
    }
  }
};

// Q2_K (kMin -1) and Q3_K: value 128 half + 32 pass + l is the 2-bit field at bit 2 pass of
// qs[32 half + l]; Q3_K subtracts 4 where bit 4 half + pass of hmask[l] is clear.
template <bool kQ3>
struct CodecK2 {
  using Block = std::conditional_t<kQ3, GgmlBlockQ3_K, GgmlBlockQ2_K>;
  static constexpr int64_t kBlock = kGgmlQK_K, kBytes = sizeof(Block);
  static constexpr int kGroup = 16, kMin = kQ3 ? 0 : -1;
  static void unpack(const uint8_t* p, int8_t* q, float* d, float* m) {
    const __m128i low4 = _mm_set1_epi8(0x0F);
    if constexpr (kQ3) {
      // Scale j: low bits in nibble j / 8 of byte j % 8, top two at bit 2 (j / 4) of byte
      // 8 + j % 4, biased by 32.
      const uint8_t* s = p + offsetof(Block, scales);
      const __m128i l8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
      const __m128i low =
          _mm_unpacklo_epi64(_mm_and_si128(l8, low4), _mm_and_si128(_mm_srli_epi16(l8, 4), low4));
      uint32_t top;
      std::memcpy(&top, s + 8, sizeof top);
      const __m128i high = _mm_and_si128(
          _mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(top)), _mm_setr_epi32(0, 2, 4, 6)),
          _mm_set1_epi8(0x03));
      const __m128i sc =
          _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
      scale16<true>(sc, half_scale(p + offsetof(Block, d)), d);
    } else {
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      scale16<false>(_mm_and_si128(sc, low4), half_scale(p + offsetof(Block, d)), d);
      scale16<false>(_mm_and_si128(_mm_srli_epi16(sc, 4), low4),
                     half_scale(p + offsetof(Block, dmin)), m);
    }
    const __m256i two = _mm256_set1_epi8(0x03);
    for (int half = 0; half < 2; ++half) {
      const __m256i qs =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + offsetof(Block, qs) + 32 * half));
      for (int pass = 0; pass < 4; ++pass) {
        __m256i v = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * pass), two);
        if constexpr (kQ3) {
          const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
          const __m256i bit =
              _mm256_and_si256(_mm256_srli_epi16(hm, 4 * half + pass), _mm256_set1_epi8(1));
          v = _mm256_sub_epi8(_mm256_or_si256(v, _mm256_slli_epi16(bit, 2)), _mm256_set1_epi8(4));
        }
        store32(q + 128 * half + 32 * pass, v);
      }
    }
  }
};

// Codes 8v..8v+7 of a block, sign-extended. A 32-block's codes are read back whole (a load
// the store forwards to) and widened in registers; for 256 values, straight from memory.
template <int64_t kBlock>
inline __m256i codes8(const int8_t* q, int v) {
  if constexpr (kBlock == 32) {
    const __m256i all = _mm256_load_si256(reinterpret_cast<const __m256i*>(q));
    const __m128i half = v < 2 ? _mm256_castsi256_si128(all) : _mm256_extracti128_si256(all, 1);
    return _mm256_cvtepi8_epi32(v % 2 == 0 ? half : _mm_srli_si128(half, 8));
  } else {
    return load8_i8(reinterpret_cast<const uint8_t*>(q + 8 * v));
  }
}

// One pass over R rows of blocks for MR activation rows (MR * R <= 4: eight chains): each
// block of every weight row is unpacked once, then its values go through the FMA chains of
// all MR rows eight at a time, the R weight rows interleaved.
template <class C, int MR, int R>
void codec_rows(const GgmlGemmArgs& a, const float* x, float* y, int64_t n0) {
  constexpr int64_t kGroups = C::kBlock / C::kGroup < 8 ? 8 : C::kBlock / C::kGroup;
  const uint8_t* w = a.w + n0 * a.row_bytes;
  __m256 acc[MR][R][2];
#pragma GCC unroll 4
  for (int i = 0; i < MR; ++i) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[i][r][0] = acc[i][r][1] = _mm256_setzero_ps();
  }
  alignas(32) int8_t q[R][C::kBlock];
  alignas(32) float d[R][kGroups], m[R][kGroups];
  for (int64_t b = 0; b < a.k / C::kBlock; ++b) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) C::unpack(w + r * a.row_bytes + b * C::kBytes, q[r], d[r], m[r]);
    const float* xb = x + b * C::kBlock;
#pragma GCC unroll 4
    for (int v = 0; v < C::kBlock / 8; ++v) {
      __m256 xv[MR];
#pragma GCC unroll 4
      for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(xb + i * a.ldx + 8 * v);
      const int g = 8 * v / C::kGroup;
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        const __m256 qv = _mm256_cvtepi32_ps(codes8<C::kBlock>(q[r], v));
        __m256 wv = _mm256_mul_ps(_mm256_broadcast_ss(&d[r][g]), qv);
        if constexpr (C::kMin < 0) wv = _mm256_sub_ps(wv, _mm256_broadcast_ss(&m[r][g]));
        if constexpr (C::kMin > 0) wv = _mm256_add_ps(wv, _mm256_broadcast_ss(&m[r][g]));
#pragma GCC unroll 4
        for (int i = 0; i < MR; ++i)
          acc[i][r][v % 2] = _mm256_fmadd_ps(xv[i], wv, acc[i][r][v % 2]);
      }
    }
  }
  store_dots<MR, R>(acc, y + n0, a.ldy);
}

template <class C, int R>
void codec_decode(const GgmlGemmArgs& a, int64_t n0) {
  codec_rows<C, 1, R>(a, a.x, a.y, n0);
}

// 2 <= m: activation rows four at a time against one weight row each (the weights are
// unpacked once per group of four rows), then a last pair against two weight rows at a time,
// or a last row or three against one.
template <class C>
void codec_small_m(const GgmlGemmArgs& a, int64_t n0, int64_t rows) {
  int64_t i = 0;
  for (; i + 4 <= a.m; i += 4) {
    for (int64_t r = 0; r < rows; ++r)
      codec_rows<C, 4, 1>(a, a.x + i * a.ldx, a.y + i * a.ldy, n0 + r);
  }
  const float* x = a.x + i * a.ldx;
  float* y = a.y + i * a.ldy;
  switch (a.m - i) {
    case 3:
      for (int64_t r = 0; r < rows; ++r) codec_rows<C, 3, 1>(a, x, y, n0 + r);
      break;
    case 2: {
      int64_t r = 0;
      for (; r + 2 <= rows; r += 2) codec_rows<C, 2, 2>(a, x, y, n0 + r);
      if (r < rows) codec_rows<C, 2, 1>(a, x, y, n0 + r);
      break;
    }
    case 1: {
      int64_t r = 0;
      for (; r + 2 <= rows; r += 2) codec_rows<C, 1, 2>(a, x, y, n0 + r);
      if (r < rows) codec_rows<C, 1, 1>(a, x, y, n0 + r);
      break;
    }
    default:
      break;
  }
}

// F16 (F16C, NaNs made the codec's default NaN as the dequantizer does) and BF16 rows, in the
// element order of dots(): sixteen at a time, then eight, then the masked tail, whose lanes
// past k are +0 in both paths.
template <bool kBf16>
inline __m256 half8(const uint8_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if constexpr (kBf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  const __m256 f = _mm256_cvtph_ps(h);
  const __m256 nan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
  if (_mm256_testz_ps(nan, nan)) return f;
  const __m256 canonical = _mm256_or_ps(_mm256_and_ps(f, _mm256_set1_ps(-0.0f)),
                                        _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)));
  return _mm256_blendv_ps(f, canonical, nan);
}

template <bool kBf16, int R>
void half_decode(const GgmlGemmArgs& a, int64_t n0) {
  const uint8_t* w = a.w + n0 * a.row_bytes;
  __m256 acc[1][R][2];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[0][r][0] = acc[0][r][1] = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= a.k; j += 16) {
    const __m256 x0 = _mm256_loadu_ps(a.x + j), x1 = _mm256_loadu_ps(a.x + j + 8);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const uint8_t* row = w + r * a.row_bytes + 2 * j;
      acc[0][r][0] = _mm256_fmadd_ps(x0, half8<kBf16>(row), acc[0][r][0]);
      acc[0][r][1] = _mm256_fmadd_ps(x1, half8<kBf16>(row + 16), acc[0][r][1]);
    }
  }
  for (; j < a.k; j += 8) {  // at most two passes: eight, then the tail
    const int64_t len = std::min<int64_t>(8, a.k - j);
    const __m256 xv = _mm256_maskload_ps(a.x + j, tail_mask(len));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      alignas(16) uint8_t h[16] = {};
      std::memcpy(h, w + r * a.row_bytes + 2 * j, static_cast<size_t>(2 * len));
      acc[0][r][0] = _mm256_fmadd_ps(xv, half8<kBf16>(h), acc[0][r][0]);
    }
  }
  store_dots<1, R>(acc, a.y + n0, a.ldy);
}

using DecodeFn = void (*)(const GgmlGemmArgs& a, int64_t n0);
using DecodeRows = std::array<DecodeFn, 4>;  // for 1..4 weight rows

template <class C>
constexpr DecodeRows kCodec = {codec_decode<C, 1>, codec_decode<C, 2>, codec_decode<C, 3>,
                               codec_decode<C, 4>};
template <bool kBf16>
constexpr DecodeRows kHalf = {half_decode<kBf16, 1>, half_decode<kBf16, 2>, half_decode<kBf16, 3>,
                              half_decode<kBf16, 4>};

// The fused decode kernels by type id; empty rows where the scratch path serves (F32, whose
// rows the scratch path reads in place).
constexpr std::array<DecodeRows, 40> make_decode_table() {
  std::array<DecodeRows, 40> t{};
  auto set = [&t](GgmlType type, const DecodeRows& rows) { t[static_cast<uint32_t>(type)] = rows; };
  set(GgmlType::kQ8_0, {q8_0_decode<1>, q8_0_decode<2>, q8_0_decode<3>, q8_0_decode<4>});
  set(GgmlType::kQ4_K, {q4_k_decode<1>, q4_k_decode<2>, q4_k_decode<3>, q4_k_decode<4>});
  set(GgmlType::kQ5_K, kCodec<CodecQ5K>);
  set(GgmlType::kQ6_K, kCodec<CodecQ6K>);
  set(GgmlType::kMXFP4, kCodec<CodecMxfp4>);
  set(GgmlType::kQ2_K, kCodec<CodecK2<false>>);
  set(GgmlType::kQ3_K, kCodec<CodecK2<true>>);
  set(GgmlType::kQ4_0, kCodec<Codec32<false, false>>);
  set(GgmlType::kQ4_1, kCodec<Codec32<false, true>>);
  set(GgmlType::kQ5_0, kCodec<Codec32<true, false>>);
  set(GgmlType::kQ5_1, kCodec<Codec32<true, true>>);
  set(GgmlType::kF16, kHalf<false>);
  set(GgmlType::kBF16, kHalf<true>);
  return t;
}
constexpr std::array<DecodeRows, 40> kDecode = make_decode_table();

using SmallMFn = void (*)(const GgmlGemmArgs& a, int64_t n0, int64_t rows);
struct SmallM {
  SmallMFn fn = nullptr;
  int64_t max_m = 0;  // the scratch path serves larger m
};

// Where the weights unpacked once per group of activation rows beat one dequantization into
// the scratch shared by all rows (measured at n = k = 2048): up to m = 8 for the 32-blocks,
// only m = 2 (two weight rows per pass) for the super-blocks, whose R = 1 passes lose.
template <class C>
constexpr SmallM kSmall = {codec_small_m<C>, C::kBlock == kGgmlQK ? 8 : 2};

// The fused kernels for 2 <= m by type id; empty where the scratch path serves.
constexpr std::array<SmallM, 40> make_small_m_table() {
  std::array<SmallM, 40> t{};
  auto set = [&t](GgmlType type, SmallM f) { t[static_cast<uint32_t>(type)] = f; };
  set(GgmlType::kQ8_0, kSmall<CodecQ8_0>);
  set(GgmlType::kQ4_K, kSmall<CodecQ4K>);
  set(GgmlType::kQ5_K, kSmall<CodecQ5K>);
  set(GgmlType::kQ6_K, kSmall<CodecQ6K>);
  set(GgmlType::kMXFP4, kSmall<CodecMxfp4>);
  set(GgmlType::kQ2_K, kSmall<CodecK2<false>>);
  set(GgmlType::kQ3_K, kSmall<CodecK2<true>>);
  set(GgmlType::kQ4_0, kSmall<Codec32<false, false>>);
  set(GgmlType::kQ4_1, kSmall<Codec32<false, true>>);
  set(GgmlType::kQ5_0, kSmall<Codec32<true, false>>);
  set(GgmlType::kQ5_1, kSmall<Codec32<true, true>>);
  return t;
}
constexpr std::array<SmallM, 40> kSmallM = make_small_m_table();

// The fused decode kernel of a type for 1..4 rows; null where the scratch path serves.
DecodeFn decode_kernel(GgmlType t, int64_t rows) {
  const auto id = static_cast<uint32_t>(t);
  return id < kDecode.size() ? kDecode[id][static_cast<size_t>(rows - 1)] : nullptr;
}

void gemm_avx2(const GgmlGemmArgs& a, int64_t n_begin, int64_t n_end, float* scratch) {
  const GgmlKernels* fast = ggml_kernels_for(IsaLevel::kAvx2);
  const auto id = static_cast<uint32_t>(a.type);
  const GgmlDequantFn dequant = fast != nullptr && fast->dequant[id] != nullptr
                                    ? fast->dequant[id]
                                    : ggml_type_info(a.type).reference;
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kGgmlGemmRows) {
    const int64_t rows = std::min(kGgmlGemmRows, n_end - n0);
    if (a.m == 1) {
      if (const DecodeFn fused = decode_kernel(a.type, rows)) {
        fused(a, n0);
        continue;
      }
    } else if (id < kSmallM.size() && a.m <= kSmallM[id].max_m) {
      kSmallM[id].fn(a, n0, rows);
      continue;
    }
    // F32 rows are already what the dots read (row_bytes is 4k). Up to m = 8 they are read in
    // place; past that, the copy into the scratch is worth it (measured at n = k = 2048).
    const float* w = scratch;
    if (a.type == GgmlType::kF32 && a.m <= 8) {
      w = reinterpret_cast<const float*>(a.w + n0 * a.row_bytes);
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        dequant(a.w + (n0 + r) * a.row_bytes, scratch + r * a.k, a.k);
      }
    }
    switch (rows) {
      case 4:
        rows_against<4>(a, w, n0);
        break;
      case 3:
        rows_against<3>(a, w, n0);
        break;
      case 2:
        rows_against<2>(a, w, n0);
        break;
      default:
        rows_against<1>(a, w, n0);
        break;
    }
  }
}

}  // namespace

const GgmlGemmKernels kAvx2GgmlGemm = {IsaLevel::kAvx2, gemm_avx2};

}  // namespace mx::ggml_gemm_detail
