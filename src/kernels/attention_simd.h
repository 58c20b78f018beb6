// Attention over a paged FP32, BF16 or FP8 cache written once over a vector type V:
// attention_avx2.cpp and attention_avx512.cpp each include this with their own flags and
// instantiate it with their own width. The scores of up to W (head, position) pairs per pass,
// each one FMA chain over d, reduced together by V::reduce; the softmax with V's vectorized
// exp; the weighted sum of values with each output column one FMA chain over positions in
// order. Every head's result is the same sequence of operations whatever the group it runs in.
//
// V provides T (a vector of W floats), W, load (FP32 as stored, BF16 widened, E4M3 codes as
// their values times one exact power of two), store, set1, zero, add, sub, mul, max, fmadd,
// exp_nonpositive, hmax, hsum (to double) and reduce (W accumulators to one vector of their W
// sums, each sum the same tree of adds whatever its neighbours).
//
// Everything here has internal linkage, so that each ISA's copy stays its own; builtins stand
// in for <cmath>'s inline wrappers (see formats/act_quant.h).
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention.h"
#include "kernels/prefetch.h"

namespace mx::attention_detail {
namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
// Heads rounded up to a power of two: a pass holds W / that many positions (scores), and
// min(8, W / that) column vectors (values).
constexpr int pow2_at_least(int g) { return g <= 1 ? 1 : g <= 2 ? 2 : g <= 4 ? 4 : 8; }
constexpr int columns_per_pass(int w, int g) {
  return w / pow2_at_least(g) < 8 ? w / pow2_at_least(g) : 8;
}

// Asks for the lines of the bytes [p, p + bytes) into L2 (prefetcht1): with the requests
// into L1 instead, 2048 positions of a decode item read 8.0-8.2 GB/s against 9.2-9.6
// (BM_AttentionDecode, AVX2, one thread).
inline void prefetch_row(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) prefetch_line_l2(c + off);
}

// A cached element as FP32, for the tails past the last whole vector.
inline float widen(float x) { return x; }
inline float widen(uint16_t x) { return __builtin_bit_cast(float, static_cast<uint32_t>(x) << 16); }
inline float widen(uint8_t x) {
  return __builtin_bit_cast(float, (static_cast<uint32_t>(x & 0x7F) << 20) |
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

// scores <- exp(scores - max), returning 1 / their sum (the softmax's normalizer).
template <class V>
float exp_scores(float* scores, int64_t len) {
  const int64_t lw = len / V::W * V::W;
  typename V::T mv = V::set1(-INFINITY);
  for (int64_t t = 0; t < lw; t += V::W) mv = V::max(mv, V::load(scores + t));
  float mx = V::hmax(mv);
  for (int64_t t = lw; t < len; ++t) mx = __builtin_fmaxf(mx, scores[t]);
  const typename V::T mxv = V::set1(mx);
  typename V::T sv = V::zero();
  for (int64_t t = 0; t < lw; t += V::W) {
    const typename V::T e = V::exp_nonpositive(V::sub(V::load(scores + t), mxv));
    V::store(scores + t, e);
    sv = V::add(sv, e);
  }
  double sum = V::hsum(sv);
  for (int64_t t = lw; t < len; ++t) {
    scores[t] = __builtin_expf(scores[t] - mx);
    sum += scores[t];
  }
  return static_cast<float>(1.0 / sum);
}

// Scores of G heads (at most eight) for positions [0, len): P positions per pass (G * P <= 16
// accumulators), each score one FMA chain over d in 16-wide steps, reduced by reduce16, the
// tail of d added in order, times the row scale (FP8) and scale, into scores[h * sld + t]. A
// block's last pass repeats its final position in the unused lanes and keeps only the real
// ones. Where pf_ahead > 0, each pass also asks for the keys of its positions pf_ahead
// blocks on, among the pf_blocks that k_blocks holds.
template <class V, int G, typename T>
void head_scores(const float* q, const T* const* k_blocks, const float* const* ks,
                 int64_t block_size, int64_t len, int64_t ld, int64_t head_dim, float scale,
                 float* scores, int64_t sld, int64_t pf_ahead, int64_t pf_blocks) {
  constexpr int P = static_cast<int>(V::W) / pow2_at_least(G);
  const int64_t dw = head_dim / V::W * V::W;
  for (int64_t t0 = 0, blk = 0; t0 < len; t0 += block_size, ++blk) {
    const int64_t count = min64(block_size, len - t0);
    for (int64_t j = 0; j < count; j += P) {
      const int live = static_cast<int>(min64(P, count - j));
      const T* k[P];
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) k[p] = k_blocks[blk] + (j + (p < live ? p : live - 1)) * ld;
      if (pf_ahead > 0 && blk + pf_ahead < pf_blocks) {
        const T* next = k_blocks[blk + pf_ahead] + j * ld;
        for (int p = 0; p < live; ++p) {
          prefetch_row(next + p * ld, head_dim * static_cast<int64_t>(sizeof(T)));
        }
      }
      typename V::T acc[G][P];
#pragma GCC unroll 8
      for (int h = 0; h < G; ++h) {
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) acc[h][p] = V::zero();
      }
      for (int64_t d = 0; d < dw; d += V::W) {
        typename V::T qv[G];
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) {
          qv[h] = V::load(q + h * head_dim + d);
          // Held in a register for the pass's P positions: left to itself GCC folds the load
          // into each of their FMAs (AVX-512 tables, eight heads: 61-62 -> 67-68 GFLOP/s in
          // BM_AttentionRows/avx512_one). With one position a pass it is used once.
          if constexpr (P > 1) asm("" : "+x"(qv[h]));
        }
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
          const typename V::T kv = V::load(k[p] + d);
#pragma GCC unroll 8
          for (int h = 0; h < G; ++h) acc[h][p] = V::fmadd(qv[h], kv, acc[h][p]);
        }
      }
      typename V::T flat[V::W];
#pragma GCC unroll 16
      for (int i = 0; i < V::W; ++i) {
        const int f = i < G * P ? i : G * P - 1;
        flat[i] = acc[f / P][f % P];
      }
      typename V::T sums = V::reduce(flat);
      alignas(64) float rs[V::W];
      if constexpr (std::is_same_v<T, uint8_t>) {
        for (int i = 0; i < V::W; ++i) {
          const int p = (i < G * P ? i : G * P - 1) % P;
          rs[i] = row_scale<T>(ks, blk, j + (p < live ? p : live - 1));
        }
        if (dw == head_dim) sums = V::mul(sums, V::load(rs));
      }
      alignas(64) float sum[V::W];
      if (dw == head_dim) {
        V::store(sum, V::mul(sums, V::set1(scale)));
        for (int h = 0; h < G; ++h) {
          for (int p = 0; p < live; ++p) scores[h * sld + t0 + j + p] = sum[h * P + p];
        }
        continue;
      }
      V::store(sum, sums);
      for (int h = 0; h < G; ++h) {
        const float* qh = q + h * head_dim;
        for (int p = 0; p < live; ++p) {
          float sc = sum[h * P + p];
          for (int64_t d = dw; d < head_dim; ++d) sc = __builtin_fmaf(qh[d], widen(k[p][d]), sc);
          if constexpr (std::is_same_v<T, uint8_t>) sc *= rs[h * P + p];
          scores[h * sld + t0 + j + p] = sc * scale;
        }
      }
    }
  }
}

// The weighted sum of G heads' values over positions [t_begin, t_end) (softmax weights at
// scores[h * sld + t]) added to acc[h * head_dim + d], or written there when `first`. W column
// vectors per pass (W * G <= 16 accumulators), each output column one FMA chain over t in
// order; the chain continues from acc across calls, so splitting the positions into calls
// changes nothing. The first column pass also asks for the values pf_ahead blocks on, below
// position pf_end (none where pf_ahead is 0): asked for a line per position in each pass
// instead, the requests' own work took an L2-resident item from 64 to 52-55 GFLOP/s.
template <class V, int G, typename T>
void head_values(const float* scores, int64_t sld, const T* const* v_blocks, int64_t block_size,
                 int64_t t_begin, int64_t t_end, int64_t ld, int64_t head_dim, float* acc,
                 bool first, int64_t pf_ahead, int64_t pf_end) {
  constexpr int W = columns_per_pass(static_cast<int>(V::W), G);
  const int64_t dw = head_dim / V::W * V::W;
  for (int64_t d0 = 0; d0 < dw; d0 += V::W * W) {
    const int w = static_cast<int>(min64(W, (dw - d0) / V::W));
    // Columns past the head's end (a last pass with w < W) repeat a real one, unused.
    int64_t col[W];
    for (int c = 0; c < W; ++c) col[c] = V::W * (c < w ? c : w - 1);
    typename V::T o[G][W];
#pragma GCC unroll 8
    for (int h = 0; h < G; ++h) {
#pragma GCC unroll 8
      for (int c = 0; c < W; ++c) {
        o[h][c] = first ? V::zero() : V::load(acc + h * head_dim + d0 + col[c]);
      }
    }
    for (int64_t t = t_begin; t < t_end;) {
      const int64_t off = t % block_size, n = min64(block_size - off, t_end - t);
      const T* vb = v_blocks[t / block_size] + off * ld + d0;
      // The first pass asks for whole rows of the positions pf_ahead blocks on.
      const int64_t pf_n =
          pf_ahead > 0 && d0 == 0 ? min64(n, pf_end - t - pf_ahead * block_size) : 0;
      if (pf_n > 0) {
        const T* next = v_blocks[t / block_size + pf_ahead] + off * ld;
        for (int64_t i = 0; i < pf_n; ++i) {
          prefetch_row(next + i * ld, head_dim * static_cast<int64_t>(sizeof(T)));
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        const T* vt = vb + i * ld;
        typename V::T v[W];
#pragma GCC unroll 8
        for (int c = 0; c < W; ++c) v[c] = V::load(vt + col[c]);
#pragma GCC unroll 8
        for (int h = 0; h < G; ++h) {
          const typename V::T p = V::set1(scores[h * sld + t + i]);
#pragma GCC unroll 8
          for (int c = 0; c < W; ++c) o[h][c] = V::fmadd(p, v[c], o[h][c]);
        }
      }
      t += n;
    }
    for (int h = 0; h < G; ++h) {
      for (int c = 0; c < w; ++c) V::store(acc + h * head_dim + d0 + V::W * c, o[h][c]);
    }
  }
  for (int h = 0; h < G; ++h) {
    for (int64_t d = dw; d < head_dim; ++d) {
      float s = first ? 0.0f : acc[h * head_dim + d];
      for (int64_t t = t_begin; t < t_end; ++t)
        s = __builtin_fmaf(scores[h * sld + t],
                           widen(v_blocks[t / block_size][(t % block_size) * ld + d]), s);
      acc[h * head_dim + d] = s;
    }
  }
}

// Positions taken at a time over all rows of a call: whole cache blocks, about 32 positions
// (16 KB of FP32 keys or values at head_dim 128), so that a chunk read for the first row stays
// in L1 for the others, and for every column pass of the values.
inline int64_t chunk_positions(int64_t block_size) {
  return block_size >= 32 ? block_size : 32 / block_size * block_size;
}

// Heads [h0, h0 + G) (G at most eight) of every row of a: scores chunk by chunk for all rows,
// the softmax of each row, then the values chunk by chunk, and the sums times the softmax's
// normalizer into out. Per (row, head), the operations of one row alone, in the same order.
template <class V, int G, typename T>
void heads_rows(const AttentionRows& a, int64_t h0, const T* const* k_blocks,
                const T* const* v_blocks, const float* const* ks, const float* const* vs) {
  const int64_t max_len = a.len0 + a.rows - 1, bs = a.block_size, hd = a.head_dim;
  const int64_t chunk = chunk_positions(bs), dw = hd / V::W * V::W;
  // The first row to reach a chunk asks for the next chunk's keys (values) while it reads
  // this one's; the rows after it find the chunk in cache. A decode step's keys and values
  // come from memory, and the hardware prefetcher alone, meeting a jump at every block, left
  // the reads waiting: BM_AttentionDecode (AVX2, one thread) read 5.1-5.7 GB/s at 2048
  // positions and 6.4-7.9 at 576, against 9.5 and 12.8-13.0 with the requests.
  const int64_t nblk = (max_len + bs - 1) / bs;
  // scratch: scores [rows][group][max_len], then sums [rows][group][head_dim].
  auto scores_of = [&](int64_t j) { return a.scratch + (j * a.group + h0) * max_len; };
  auto acc_of = [&](int64_t j) {
    return a.scratch + a.rows * a.group * max_len + (j * a.group + h0) * hd;
  };
  for (int64_t c0 = 0; c0 < max_len; c0 += chunk) {
    const int64_t cb = c0 / bs;
    // Rows are in order of length: those that reach this chunk are the last ones.
    const int64_t first = max64(0, c0 + 1 - a.len0);
    for (int64_t j = first; j < a.rows; ++j) {
      const bool lead = j == first;
      const float* q = a.q + j * a.q_ld + h0 * hd;
      const float* const* kss = ks != nullptr ? ks + cb : nullptr;
      const int64_t len = min64(chunk, a.len0 + j - c0);
      head_scores<V, G, T>(q, k_blocks + cb, kss, bs, len, a.ld, hd, a.scale, scores_of(j) + c0,
                           max_len, lead ? chunk / bs : 0, nblk - cb);
    }
  }
  float inv[kAttentionMaxRows][G];
  for (int64_t j = 0; j < a.rows; ++j) {
    const int64_t len = a.len0 + j;
    for (int h = 0; h < G; ++h) {
      float* sc = scores_of(j) + h * max_len;
      inv[j][h] = exp_scores<V>(sc, len);
      if constexpr (std::is_same_v<T, uint8_t>) {
        // Each softmax weight takes its value row's scale (the normalizer is already summed).
        for (int64_t t0 = 0, blk = 0; t0 < len; t0 += bs, ++blk) {
          const int64_t count = min64(bs, len - t0);
          for (int64_t i = 0; i < count; ++i) sc[t0 + i] *= vs[blk][i];
        }
      }
    }
  }
  for (int64_t c0 = 0; c0 < max_len; c0 += chunk) {
    // Rows are in order of length: those that reach this chunk are the last ones.
    const int64_t first = max64(0, c0 + 1 - a.len0);
    for (int64_t j = first; j < a.rows; ++j) {
      const bool lead = j == first;
      const int64_t end = min64(c0 + chunk, a.len0 + j);
      head_values<V, G, T>(scores_of(j), max_len, v_blocks, bs, c0, end, a.ld, hd, acc_of(j),
                           c0 == 0, lead ? chunk / bs : 0, max_len);
    }
  }
  for (int64_t j = 0; j < a.rows; ++j) {
    const float* acc = acc_of(j);
    float* out = a.out + j * a.out_ld + h0 * hd;
    for (int h = 0; h < G; ++h) {
      const typename V::T iv = V::set1(inv[j][h]);
      for (int64_t d = 0; d < dw; d += V::W)
        V::store(out + h * hd + d, V::mul(V::load(acc + h * hd + d), iv));
      for (int64_t d = dw; d < hd; ++d) out[h * hd + d] = acc[h * hd + d] * inv[j][h];
    }
  }
}

// Groups past eight heads run in parts of at most eight.
template <class V, typename T>
void group_scaled(const AttentionRows& a, const T* const* k_blocks, const T* const* v_blocks,
                  const float* const* ks, const float* const* vs) {
  using Fn = void (*)(const AttentionRows&, int64_t, const T* const*, const T* const*,
                      const float* const*, const float* const*);
  constexpr Fn kHeads[9] = {nullptr,
                            heads_rows<V, 1, T>,
                            heads_rows<V, 2, T>,
                            heads_rows<V, 3, T>,
                            heads_rows<V, 4, T>,
                            heads_rows<V, 5, T>,
                            heads_rows<V, 6, T>,
                            heads_rows<V, 7, T>,
                            heads_rows<V, 8, T>};
  for (int64_t h = 0; h < a.group; h += 8) {
    kHeads[min64(8, a.group - h)](a, h, k_blocks, v_blocks, ks, vs);
  }
}

template <class V, typename T>
void group_paged(const AttentionRows& a, const T* const* k_blocks, const T* const* v_blocks) {
  group_scaled<V, T>(a, k_blocks, v_blocks, nullptr, nullptr);
}

}  // namespace
}  // namespace mx::attention_detail
