// AVX-512 attention over a paged FP32, BF16 or FP8 cache, the AVX2 kernel's plan on 16 lanes:
// the scores of up to sixteen (head, position) pairs per pass, each one FMA chain over d,
// reduced together by a transposing tree; the softmax with a vectorized exp; the weighted sum
// of values with each output column one FMA chain over positions in order. Every head's
// result is the same sequence of operations whatever the group it runs in.
//
// Compiled with AVX-512 flags: nothing here instantiates an inline function of a shared header
// that another translation unit could link in its place (see formats/act_quant.h): builtins
// stand in for <cmath>'s inline wrappers.
#include <immintrin.h>

#include <cmath>
#include <type_traits>

#include "kernels/attention.h"

namespace mx::attention_detail {
namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// exp(x) for x <= 0, as exp_nonpositive in the AVX2 kernel: 2^(x log2 e) split into the
// nearest power of two and a degree-6 Taylor polynomial of the rest; clamped at -87.
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 fl = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_mul_ps(_mm512_sub_ps(t, fl), _mm512_set1_ps(0.693147180559945309f));
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(fl), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// scores <- exp(scores - max), returning 1 / their sum (the softmax's normalizer).
float exp_scores(float* scores, int64_t len) {
  const int64_t l16 = len & ~int64_t{15};
  __m512 mv = _mm512_set1_ps(-INFINITY);
  for (int64_t t = 0; t < l16; t += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(scores + t));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, mv);
  float mx = lanes[0];
  for (int i = 1; i < 16; ++i) mx = __builtin_fmaxf(mx, lanes[i]);
  for (int64_t t = l16; t < len; ++t) mx = __builtin_fmaxf(mx, scores[t]);
  const __m512 mxv = _mm512_set1_ps(mx);
  __m512 sv = _mm512_setzero_ps();
  for (int64_t t = 0; t < l16; t += 16) {
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(scores + t), mxv));
    _mm512_storeu_ps(scores + t, e);
    sv = _mm512_add_ps(sv, e);
  }
  _mm512_store_ps(lanes, sv);
  double sum = 0;
  for (int i = 0; i < 16; ++i) sum += lanes[i];
  for (int64_t t = l16; t < len; ++t) {
    scores[t] = __builtin_expf(scores[t] - mx);
    sum += scores[t];
  }
  return static_cast<float>(1.0 / sum);
}

// Sixteen cached values as FP32: FP32 as stored, BF16 widened, E4M3 codes as the value times
// 2^-120 moved into an FP32 pattern and scaled back exactly (the AVX2 kernel's load8).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 load16(const uint8_t* p) {
  const __m512i b = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i bits =
      _mm512_and_si512(_mm512_slli_epi32(b, 20), _mm512_set1_epi32(static_cast<int>(0x87F00000u)));
  return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
}
inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return __builtin_bit_cast(float, static_cast<uint32_t>(x) << 16); }
inline float widen(uint8_t x) {
  return __builtin_bit_cast(float, (static_cast<uint32_t>(x & 0x7F) << 20) |
                                       (static_cast<uint32_t>(x & 0x80) << 24)) *
         0x1p120f;
}

template <typename T>
inline float row_scale(const float* const* s, int64_t blk, int64_t i) {
  if constexpr (std::is_same_v<T, uint8_t>) {
    return s[blk][i];
  } else {
    return 1.0f;
  }
}

// The sums of sixteen accumulators, lane i holding a[i]'s: halves, then quarters, then pairs
// and single lanes added, by 128-bit and in-lane shuffles that only move data, so that every
// sum is the same tree of adds whatever its neighbours.
inline __m512 reduce16(const __m512 (&a)[16]) {
  __m512 c[8], e[4], g[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    g[i] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0xEE));
  }
  const __m512 s =
      _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xDD));
  // Lane 4q + r now holds a[4r + q]'s sum.
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(order, s);
}

// Scores of G heads (at most eight) for positions [0, len): P positions per pass (G * P <= 16
// accumulators), each score one FMA chain over d in 16-wide steps, reduced by reduce16, the
// tail of d added in order, times the row scale (FP8) and scale. A block's last pass repeats
// its final position in the unused lanes and keeps only the real ones.
template <int G, typename T>
void head_scores(const float* q, const T* const* k_blocks, const float* const* ks,
                 int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                 float* scores) {
  constexpr int P = G == 1 ? 16 : G == 2 ? 8 : G <= 4 ? 4 : 2;
  const int64_t d16 = head_dim & ~int64_t{15};
  for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
    const int64_t count = min64(block_size, len - t0);
    for (int64_t j = 0; j < count; j += P) {
      const int live = static_cast<int>(min64(P, count - j));
      const T* k[P];
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) k[p] = k_blocks[blk] + (j + (p < live ? p : live - 1)) * ld;
      __m512 acc[G][P];
#pragma GCC unroll 8
      for (int h = 0; h < G; ++h) {
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) acc[h][p] = _mm512_setzero_ps();
      }
      for (int64_t d = 0; d < d16; d += 16) {
        __m512 qv[G];
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) qv[h] = _mm512_loadu_ps(q + h * head_dim + d);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
          const __m512 kv = load16(k[p] + d);
#pragma GCC unroll 8
          for (int h = 0; h < G; ++h) acc[h][p] = _mm512_fmadd_ps(qv[h], kv, acc[h][p]);
        }
      }
      __m512 flat[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const int f = i < G * P ? i : G * P - 1;
        flat[i] = acc[f / P][f % P];
      }
      __m512 sums = reduce16(flat);
      alignas(64) float rs[16];
      if constexpr (std::is_same_v<T, uint8_t>) {
        for (int i = 0; i < 16; ++i) {
          const int p = (i < G * P ? i : G * P - 1) % P;
          rs[i] = row_scale<T>(ks, blk, j + (p < live ? p : live - 1));
        }
        if (d16 == head_dim) sums = _mm512_mul_ps(sums, _mm512_load_ps(rs));
      }
      alignas(64) float sum[16];
      if (d16 == head_dim) {
        _mm512_store_ps(sum, _mm512_mul_ps(sums, _mm512_set1_ps(scale)));
        for (int h = 0; h < G; ++h) {
          for (int p = 0; p < live; ++p) scores[h * len + t0 + j + p] = sum[h * P + p];
        }
        continue;
      }
      _mm512_store_ps(sum, sums);
      for (int h = 0; h < G; ++h) {
        const float* qh = q + h * head_dim;
        for (int p = 0; p < live; ++p) {
          float sc = sum[h * P + p];
          for (int64_t d = d16; d < head_dim; ++d) sc = __builtin_fmaf(qh[d], widen(k[p][d]), sc);
          if constexpr (std::is_same_v<T, uint8_t>) sc *= rs[h * P + p];
          scores[h * len + t0 + j + p] = sc * scale;
        }
      }
    }
  }
}

// G heads (at most eight) over one KV head: scores, softmax, then the weighted sum of values,
// W column vectors per pass (W * G <= 16 accumulators), each output column one FMA chain over
// t in order, so every column is the same sequence of operations for any G.
template <int G, typename T>
void heads_paged(const float* q, const T* const* k_blocks, const T* const* v_blocks,
                 const float* const* ks, const float* const* vs, int64_t block_size, int64_t len,
                 int64_t ld, int64_t head_dim, float scale, float* scores, float* out) {
  constexpr int W = G <= 2 ? 8 : G <= 4 ? 4 : 2;
  const int64_t d16 = head_dim & ~int64_t{15};
  head_scores<G, T>(q, k_blocks, ks, block_size, len, ld, head_dim, scale, scores);
  float inv[G];
  for (int h = 0; h < G; ++h) inv[h] = exp_scores(scores + h * len, len);
  if constexpr (std::is_same_v<T, uint8_t>) {
    // Each softmax weight takes its value row's scale (the normalizers are already summed).
    for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
      const int64_t count = min64(block_size, len - t0);
      for (int h = 0; h < G; ++h) {
        float* sc = scores + h * len + t0;
        for (int64_t i = 0; i < count; ++i) sc[i] *= vs[blk][i];
      }
    }
  }
  for (int64_t d0 = 0; d0 < d16; d0 += 16 * W) {
    const int w = static_cast<int>(min64(W, (d16 - d0) / 16));
    // Columns past the head's end (a last pass with w < W) repeat a real one, unused.
    int64_t col[W];
    for (int c = 0; c < W; ++c) col[c] = 16 * (c < w ? c : w - 1);
    __m512 o[G][W];
#pragma GCC unroll 8
    for (int h = 0; h < G; ++h) {
#pragma GCC unroll 8
      for (int c = 0; c < W; ++c) o[h][c] = _mm512_setzero_ps();
    }
    for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
      const int64_t count = min64(block_size, len - t0);
      const T* vb = v_blocks[blk] + d0;
      for (int64_t i = 0; i < count; ++i) {
        const T* vt = vb + i * ld;
        __m512 v[W];
#pragma GCC unroll 8
        for (int c = 0; c < W; ++c) v[c] = load16(vt + col[c]);
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) {
          const __m512 p = _mm512_set1_ps(scores[h * len + t0 + i]);
#pragma GCC unroll 8
          for (int c = 0; c < W; ++c) o[h][c] = _mm512_fmadd_ps(p, v[c], o[h][c]);
        }
      }
    }
    for (int h = 0; h < G; ++h) {
      const __m512 iv = _mm512_set1_ps(inv[h]);
      for (int c = 0; c < w; ++c)
        _mm512_storeu_ps(out + h * head_dim + d0 + 16 * c, _mm512_mul_ps(o[h][c], iv));
    }
  }
  for (int h = 0; h < G; ++h) {
    for (int64_t d = d16; d < head_dim; ++d) {
      float acc = 0.0f;
      for (int64_t t = 0; t < len; ++t)
        acc = __builtin_fmaf(scores[h * len + t],
                             widen(v_blocks[t / block_size][(t % block_size) * ld + d]), acc);
      out[h * head_dim + d] = acc * inv[h];
    }
  }
}

void head_paged_avx512(const float* q, const float* const* k_blocks, const float* const* v_blocks,
                       int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                       float* scores, float* out) {
  heads_paged<1, float>(q, k_blocks, v_blocks, nullptr, nullptr, block_size, len, ld, head_dim,
                        scale, scores, out);
}

// Groups past eight heads run in parts of at most eight.
template <typename T>
void group_scaled_avx512(const float* q, int64_t group, const T* const* k_blocks,
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
    const int64_t g = min64(8, group - h);
    kHeads[g](q + h * head_dim, k_blocks, v_blocks, ks, vs, block_size, len, ld, head_dim, scale,
              scores + h * len, out + h * head_dim);
  }
}

template <typename T>
void group_paged_avx512(const float* q, int64_t group, const T* const* k_blocks,
                        const T* const* v_blocks, int64_t block_size, int64_t len, int64_t ld,
                        int64_t head_dim, float scale, float* scores, float* out) {
  group_scaled_avx512<T>(q, group, k_blocks, v_blocks, nullptr, nullptr, block_size, len, ld,
                         head_dim, scale, scores, out);
}

}  // namespace

const AttentionKernels kAvx512Attention = {IsaLevel::kAvx512, head_paged_avx512,
                                           group_paged_avx512<float>, group_paged_avx512<uint16_t>,
                                           group_scaled_avx512<uint8_t>};

}  // namespace mx::attention_detail
