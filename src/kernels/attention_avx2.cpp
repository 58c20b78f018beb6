// AVX2 attention over a paged FP32, BF16 or FP8 cache: the scores of several positions at once
// (independent FMA chains over d, reduced together), the softmax with a vectorized exp, and
// the weighted sum of values accumulated in registers.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

#include "kernels/attention.h"

namespace mx::attention_detail {
namespace {

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

inline float hmax(__m256 v) {
  const __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
}

// exp(x) for x <= 0 (arguments of a max-subtracted softmax): 2^(x log2 e) split into the
// nearest integer power of two and a degree-6 Taylor polynomial of the rest (|f| <= ln2 / 2),
// relative error ~2e-7; inputs are clamped at -87, where the result is ~1.6e-38.
inline __m256 exp_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 t = _mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f));
  const __m256 fl = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_mul_ps(_mm256_sub_ps(t, fl), _mm256_set1_ps(0.693147180559945309f));
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fl), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// scores <- exp(scores - max), returning 1 / their sum (the softmax's normalizer).
float exp_scores(float* scores, int64_t len) {
  const int64_t l8 = len & ~int64_t{7};
  __m256 mv = _mm256_set1_ps(-INFINITY);
  for (int64_t t = 0; t < l8; t += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(scores + t));
  float mx = hmax(mv);
  for (int64_t t = l8; t < len; ++t) mx = std::fmax(mx, scores[t]);
  const __m256 mxv = _mm256_set1_ps(mx);
  __m256 sv = _mm256_setzero_ps();
  for (int64_t t = 0; t < l8; t += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + t), mxv));
    _mm256_storeu_ps(scores + t, e);
    sv = _mm256_add_ps(sv, e);
  }
  double sum = hsum(sv);
  for (int64_t t = l8; t < len; ++t) {
    scores[t] = std::exp(scores[t] - mx);
    sum += scores[t];
  }
  return static_cast<float>(1.0 / sum);
}

// Eight cached values as FP32: FP32 as stored, BF16 widened (its bits are the FP32's top half).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
// E4M3 codes: sign-extended to 32 bits and shifted left by 20, a code's seven exponent and
// mantissa bits land at the FP32 exponent's low end and copies of its sign fill bits 27-31;
// the mask keeps bit 31 of those. The pattern reads as the value times 2^-120 (subnormal codes
// become FP32 subnormals) and is scaled back exactly: four operations per eight codes. NaN
// codes are never written (a row that is not finite stores a NaN scale instead).
inline __m256 load8(const uint8_t* p) {
  const __m256i b = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  const __m256i bits =
      _mm256_and_si256(_mm256_slli_epi32(b, 20), _mm256_set1_epi32(static_cast<int>(0x87F00000u)));
  return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
}
inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return std::bit_cast<float>(static_cast<uint32_t>(x) << 16); }
inline float widen(uint8_t x) {
  return std::bit_cast<float>((static_cast<uint32_t>(x & 0x7F) << 20) |
                              (static_cast<uint32_t>(x & 0x80) << 24)) *
         0x1p120f;
}

// A position's row scale: FP8 caches scale each key and value row by a power of two, applied
// to its score (keys) and to its softmax weight (values); the products are the same as those
// of the scaled elements, so the result is group_paged's on the widened rows, bit for bit.
template <typename T>
inline float row_scale(const float* const* s, int64_t blk, int64_t i) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    return s[blk][i];
  } else {
    return 1.0f;
  }
}

// Eight dot-product accumulators reduced to their eight sums, in order: pairs added within
// 128-bit lanes twice, then the two lanes. Every sum comes out of the same adds whatever its
// neighbours, so a score does not depend on how many positions share a pass.
inline __m256 reduce8(const __m256* a) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Scores of G heads (at most eight) for positions [0, len): P positions per pass (P * G
// accumulators; from five heads on one position, its query rows read from memory by the FMAs), each
// score one FMA chain over d in 8-wide steps, reduced by reduce8, the tail of d added in order
// (explicit FMAs, so that no element type changes the rounding), times scale. A block's last pass
// repeats its final position in the unused lanes and keeps only the real ones.
template <int G, typename T>
void head_scores(const float* q, const T* const* k_blocks, const float* const* ks,
                 int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                 float* scores) {
  constexpr int P = G == 1 ? 8 : G == 2 ? 4 : G <= 4 ? 2 : 1;
  const int64_t d8 = head_dim & ~int64_t{7};
  for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
    const int64_t count = std::min(block_size, len - t0);
    for (int64_t j = 0; j < count; j += P) {
      const int live = static_cast<int>(std::min<int64_t>(P, count - j));
      const T* k[P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) k[p] = k_blocks[blk] + (j + std::min(p, live - 1)) * ld;
      __m256 acc[G][P];
#pragma GCC unroll 8
      for (int h = 0; h < G; ++h) {
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) acc[h][p] = _mm256_setzero_ps();
      }
      for (int64_t d = 0; d < d8; d += 8) {
        __m256 qv[G];
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) qv[h] = _mm256_loadu_ps(q + h * head_dim + d);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const __m256 kv = load8(k[p] + d);
#pragma GCC unroll 8
          for (int h = 0; h < G; ++h) acc[h][p] = _mm256_fmadd_ps(qv[h], kv, acc[h][p]);
        }
      }
      // All G * P sums in one reduction (a pass of three heads pads with its last one).
      __m256 flat[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        const int f = std::min(i, G * P - 1);
        flat[i] = acc[f / P][f % P];
      }
      __m256 sums = reduce8(flat);
      alignas(32) float rs[8];
      if constexpr (std::is_same_v<T, uint8_t>) {
        for (int i = 0; i < 8; ++i) {
          rs[i] = row_scale<T>(ks, blk, j + std::min(std::min(i, G * P - 1) % P, live - 1));
        }
        if (d8 == head_dim) sums = _mm256_mul_ps(sums, _mm256_load_ps(rs));
      }
      if (live == P && d8 == head_dim && (P == 8 || P == 4)) {
        // Whole passes without a tail of d: each head's P scores in one store.
        const __m256 scaled = _mm256_mul_ps(sums, _mm256_set1_ps(scale));
        if constexpr (P == 8) {
          _mm256_storeu_ps(scores + t0 + j, scaled);
        } else if constexpr (P == 4) {
          _mm_storeu_ps(scores + t0 + j, _mm256_castps256_ps128(scaled));
          _mm_storeu_ps(scores + len + t0 + j, _mm256_extractf128_ps(scaled, 1));
        }
        continue;
      }
      alignas(32) float sum[8];
      _mm256_store_ps(sum, sums);
      for (int h = 0; h < G; ++h) {
        const float* qh = q + h * head_dim;
        for (int p = 0; p < live; ++p) {
          float sc = sum[h * P + p];
          for (int64_t d = d8; d < head_dim; ++d) sc = std::fma(qh[d], widen(k[p][d]), sc);
          if constexpr (std::is_same_v<T, uint8_t>) {
            if (d8 != head_dim) sc *= rs[h * P + p];
          }
          scores[h * len + t0 + j + p] = sc * scale;
        }
      }
    }
  }
}

// G heads (at most eight) over one KV head: scores, softmax, then the weighted sum of values,
// W column vectors per pass (W * G accumulators, each one FMA chain over t in order), so
// every output column is the same sequence of operations for any G.
template <int G, typename T>
void heads_paged(const float* q, const T* const* k_blocks, const T* const* v_blocks,
                 const float* const* ks, const float* const* vs, int64_t block_size, int64_t len,
                 int64_t ld, int64_t head_dim, float scale, float* scores, float* out) {
  constexpr int W = G == 1 ? 8 : G == 2 ? 4 : G <= 4 ? 2 : 1;
  const int64_t d8 = head_dim & ~int64_t{7};
  head_scores<G, T>(q, k_blocks, ks, block_size, len, ld, head_dim, scale, scores);
  float inv[G];
  for (int h = 0; h < G; ++h) inv[h] = exp_scores(scores + h * len, len);
  if constexpr (std::is_same_v<T, uint8_t>) {
    // Each softmax weight takes its value row's scale (the normalizers are already summed).
    for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
      const int64_t count = std::min(block_size, len - t0);
      for (int h = 0; h < G; ++h) {
        float* sc = scores + h * len + t0;
        for (int64_t i = 0; i < count; ++i) sc[i] *= vs[blk][i];
      }
    }
  }
  for (int64_t d0 = 0; d0 < d8; d0 += 8 * W) {
    const int w = static_cast<int>(std::min<int64_t>(W, (d8 - d0) / 8));
    // Columns past the head's end (a last pass with w < W) repeat a real one, unused.
    int64_t col[W];
    for (int c = 0; c < W; ++c) col[c] = 8 * std::min(c, w - 1);
    __m256 o[G][W];
#pragma GCC unroll 8
    for (int h = 0; h < G; ++h) {
#pragma GCC unroll 8
      for (int c = 0; c < W; ++c) o[h][c] = _mm256_setzero_ps();
    }
    for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
      const int64_t count = std::min(block_size, len - t0);
      const T* vb = v_blocks[blk] + d0;
      for (int64_t i = 0; i < count; ++i) {
        const T* vt = vb + i * ld;
        __m256 v[W];
#pragma GCC unroll 8
        for (int c = 0; c < W; ++c) v[c] = load8(vt + col[c]);
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) {
          const __m256 p = _mm256_set1_ps(scores[h * len + t0 + i]);
#pragma GCC unroll 8
          for (int c = 0; c < W; ++c) o[h][c] = _mm256_fmadd_ps(p, v[c], o[h][c]);
        }
      }
    }
    for (int h = 0; h < G; ++h) {
      const __m256 iv = _mm256_set1_ps(inv[h]);
      for (int c = 0; c < w; ++c)
        _mm256_storeu_ps(out + h * head_dim + d0 + 8 * c, _mm256_mul_ps(o[h][c], iv));
    }
  }
  for (int h = 0; h < G; ++h) {
    for (int64_t d = d8; d < head_dim; ++d) {
      float acc = 0.0f;
      for (int64_t t = 0; t < len; ++t)
        acc = std::fma(scores[h * len + t],
                       widen(v_blocks[t / block_size][(t % block_size) * ld + d]), acc);
      out[h * head_dim + d] = acc * inv[h];
    }
  }
}

void head_paged_avx2(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                     int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                     float* scores, float* out) {
  heads_paged<1, float>(q, k_blocks, v_blocks, nullptr, nullptr, block_size, len, ld, head_dim,
                        scale, scores, out);
}

// Groups past eight heads run in parts of at most eight.
template <typename T>
void group_scaled_avx2(const float* q, int64_t group, const T* const* k_blocks,
                       const T* const* v_blocks, const float* const* ks, const float* const* vs,
                       int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                       float* scores, float* out) {
  using Fn =
      void (*)(const float*, const T* const*, const T* const*, const float* const*,
               const float* const*, int64_t, int64_t, int64_t, int64_t, float, float*, float*);
  constexpr Fn kHeads[9] = {nullptr,           heads_paged<1, T>, heads_paged<2, T>,
                            heads_paged<3, T>, heads_paged<4, T>, heads_paged<5, T>,
                            heads_paged<6, T>, heads_paged<7, T>, heads_paged<8, T>};
  for (int64_t h = 0; h < group; h += 8) {
    const int64_t g = std::min<int64_t>(8, group - h);
    kHeads[g](q + h * head_dim, k_blocks, v_blocks, ks, vs, block_size, len, ld, head_dim, scale,
              scores + h * len, out + h * head_dim);
  }
}

template <typename T>
void group_paged_avx2(const float* q, int64_t group, const T* const* k_blocks,
                      const T* const* v_blocks, int64_t block_size, int64_t len, int64_t ld,
                      int64_t head_dim, float scale, float* scores, float* out) {
  group_scaled_avx2<T>(q, group, k_blocks, v_blocks, nullptr, nullptr, block_size, len, ld,
                       head_dim, scale, scores, out);
}

}  // namespace

const AttentionKernels kAvx2Attention = {IsaLevel::kAvx2, head_paged_avx2, group_paged_avx2<float>,
                                         group_paged_avx2<uint16_t>, group_scaled_avx2<uint8_t>};

}  // namespace mx::attention_detail
