// AVX2 attention head: q . k with 8-wide FMAs, the softmax with a vectorized exp, and the
// weighted sum of values accumulated in registers 64 columns at a time.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

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

void head_paged_avx2(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                     int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                     float* scores, float* out) {
  const int64_t d8 = head_dim & ~int64_t{7};
  // Block by block (a position's block and slot come without a division), four positions at
  // a time: four independent FMA chains instead of one latency-bound chain.
  auto finish = [&](__m256 acc, const float* kt) {
    float s = hsum(acc);
    for (int64_t d = d8; d < head_dim; ++d) s += q[d] * kt[d];
    return s * scale;
  };
  for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
    const int64_t count = std::min(block_size, len - t0);
    const float* kb = k_blocks[blk];
    int64_t j = 0;
    for (; j + 4 <= count; j += 4) {
      const float* k0 = kb + j * ld;
      const float *k1 = k0 + ld, *k2 = k1 + ld, *k3 = k2 + ld;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t d = 0; d < d8; d += 8) {
        const __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), a0);
        a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k1 + d), a1);
        a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k2 + d), a2);
        a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k3 + d), a3);
      }
      scores[t0 + j] = finish(a0, k0);
      scores[t0 + j + 1] = finish(a1, k1);
      scores[t0 + j + 2] = finish(a2, k2);
      scores[t0 + j + 3] = finish(a3, k3);
    }
    for (; j < count; ++j) {
      const float* kt = kb + j * ld;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t d = 0; d < d8; d += 8)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(kt + d), acc);
      scores[t0 + j] = finish(acc, kt);
    }
  }
  const float inv = exp_scores(scores, len);
  // Up to 64 columns per pass: eight accumulator chains.
  for (int64_t d0 = 0; d0 < d8; d0 += 64) {
    const int64_t w = d8 - d0 < 64 ? (d8 - d0) / 8 : 8;
    __m256 o[8];
    for (auto& v : o) v = _mm256_setzero_ps();
    for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
      const int64_t count = std::min(block_size, len - t0);
      const float* vb = v_blocks[blk] + d0;
      for (int64_t i = 0; i < count; ++i) {
        const __m256 p = _mm256_set1_ps(scores[t0 + i]);
        const float* vt = vb + i * ld;
        for (int64_t j = 0; j < w; ++j)
          o[j] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vt + 8 * j), o[j]);
      }
    }
    const __m256 iv = _mm256_set1_ps(inv);
    for (int64_t j = 0; j < w; ++j) _mm256_storeu_ps(out + d0 + 8 * j, _mm256_mul_ps(o[j], iv));
  }
  for (int64_t d = d8; d < head_dim; ++d) {
    float acc = 0.0f;
    for (int64_t t = 0; t < len; ++t)
      acc += scores[t] * v_blocks[t / block_size][(t % block_size) * ld + d];
    out[d] = acc * inv;
  }
}

// G (<= 4) heads of a group: each key row is loaded once for the G dot products and each value
// row once for the G weighted sums, with the operations of head_paged_avx2 per head (the same
// FMA chain over d for a score, the same chain over t for an output column).
template <int G>
void heads_paged(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                 int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                 float* scores, float* out) {
  const int64_t d8 = head_dim & ~int64_t{7};
  for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
    const int64_t count = std::min(block_size, len - t0);
    for (int64_t j = 0; j < count; ++j) {
      const float* kt = k_blocks[blk] + j * ld;
      __m256 acc[G];
      for (int h = 0; h < G; ++h) acc[h] = _mm256_setzero_ps();
      for (int64_t d = 0; d < d8; d += 8) {
        const __m256 kv = _mm256_loadu_ps(kt + d);
        for (int h = 0; h < G; ++h)
          acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * head_dim + d), kv, acc[h]);
      }
      for (int h = 0; h < G; ++h) {
        const float* qh = q + h * head_dim;
        float sc = hsum(acc[h]);
        for (int64_t d = d8; d < head_dim; ++d) sc += qh[d] * kt[d];
        scores[h * len + t0 + j] = sc * scale;
      }
    }
  }
  float inv[G];
  for (int h = 0; h < G; ++h) inv[h] = exp_scores(scores + h * len, len);
  // Sixteen columns per pass for G heads: 2 * G accumulator chains.
  for (int64_t d0 = 0; d0 < d8; d0 += 16) {
    const int w = d8 - d0 >= 16 ? 2 : 1;
    __m256 o[G][2];
    for (int h = 0; h < G; ++h) o[h][0] = o[h][1] = _mm256_setzero_ps();
    for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
      const int64_t count = std::min(block_size, len - t0);
      const float* vb = v_blocks[blk] + d0;
      for (int64_t i = 0; i < count; ++i) {
        const float* vt = vb + i * ld;
        const __m256 v0 = _mm256_loadu_ps(vt);
        const __m256 v1 = w == 2 ? _mm256_loadu_ps(vt + 8) : v0;
        for (int h = 0; h < G; ++h) {
          const __m256 p = _mm256_set1_ps(scores[h * len + t0 + i]);
          o[h][0] = _mm256_fmadd_ps(p, v0, o[h][0]);
          o[h][1] = _mm256_fmadd_ps(p, v1, o[h][1]);
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
        acc += scores[h * len + t] * v_blocks[t / block_size][(t % block_size) * ld + d];
      out[h * head_dim + d] = acc * inv[h];
    }
  }
}

void group_paged_avx2(const float* q, int64_t group, const float* const* k_blocks,
                      const float* const* v_blocks, int64_t block_size, int64_t len, int64_t ld,
                      int64_t head_dim, float scale, float* scores, float* out) {
  using Fn = void (*)(const float*, const float* const*, const float* const*, int64_t, int64_t,
                      int64_t, int64_t, float, float*, float*);
  constexpr Fn kHeads[5] = {nullptr, heads_paged<1>, heads_paged<2>, heads_paged<3>,
                            heads_paged<4>};
  for (int64_t h = 0; h < group; h += 4) {
    const int64_t g = std::min<int64_t>(4, group - h);
    kHeads[g](q + h * head_dim, k_blocks, v_blocks, block_size, len, ld, head_dim, scale,
              scores + h * len, out + h * head_dim);
  }
}

}  // namespace

const AttentionKernels kAvx2Attention = {IsaLevel::kAvx2, head_paged_avx2, group_paged_avx2};

}  // namespace mx::attention_detail
