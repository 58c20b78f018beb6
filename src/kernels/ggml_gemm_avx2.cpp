// AVX2 GEMM over ggml blocks (ggml_gemm.h): kGgmlGemmRows weight rows at a time are
// dequantized by the AVX2 dequantizers (bit for bit the reference's values) into the L1
// scratch, then every activation row takes its dots with those rows in FMA chains. For
// decode (m == 1) of Q8_0 and Q4_K the weights are dequantized in registers instead, by the
// same FP32 operations, and go straight into the chains.
//
// Every output sees one fixed sequence of operations, whatever m, the row's place in the
// batch, the column range or the path: element j < 8 * floor(k / 8) goes to lane j % 8 of
// chain (j / 8) % 2, the masked tail of k % 8 to chain 0; then chain 0 + chain 1, and the
// eight lanes summed in the hadd tree of hsum4. Register tiles only choose which outputs
// share the loads.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

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

using DecodeFn = void (*)(const GgmlGemmArgs& a, int64_t n0);

// The fused decode kernel of a type for 1..4 rows; null where the scratch path serves.
DecodeFn decode_kernel(GgmlType t, int64_t rows) {
  static constexpr DecodeFn kQ8_0[4] = {q8_0_decode<1>, q8_0_decode<2>, q8_0_decode<3>,
                                        q8_0_decode<4>};
  static constexpr DecodeFn kQ4_K[4] = {q4_k_decode<1>, q4_k_decode<2>, q4_k_decode<3>,
                                        q4_k_decode<4>};
  if (t == GgmlType::kQ8_0) return kQ8_0[rows - 1];
  if (t == GgmlType::kQ4_K) return kQ4_K[rows - 1];
  return nullptr;
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
    }
    for (int64_t r = 0; r < rows; ++r) {
      dequant(a.w + (n0 + r) * a.row_bytes, scratch + r * a.k, a.k);
    }
    switch (rows) {
      case 4:
        rows_against<4>(a, scratch, n0);
        break;
      case 3:
        rows_against<3>(a, scratch, n0);
        break;
      case 2:
        rows_against<2>(a, scratch, n0);
        break;
      default:
        rows_against<1>(a, scratch, n0);
        break;
    }
  }
}

}  // namespace

const GgmlGemmKernels kAvx2GgmlGemm = {IsaLevel::kAvx2, gemm_avx2};

}  // namespace mx::ggml_gemm_detail
