// The gated DeltaNet kernels written once over a vector type V: deltanet_avx2.cpp and
// deltanet_avx512.cpp each include this with their own flags and instantiate it with their
// own width. V provides T (a vector of W floats), W, and load, store, set1, zero, fmadd, mul,
// sub and silu. Each kernel vectorizes over independent outputs only (channels, value
// columns, chunk rows) and keeps the scalar reference's operation chain per output, so the
// results are bit for bit the reference's at every width, with two exceptions stated in
// kernels/deltanet.h: the row norms' sums of squares, reduced in eight lanes at every width,
// and the SiLU of the conv and the gated norm (a channel or value per token each, 12,288 a
// token and layer at Qwen3.5's widths), whose exp is V's polynomial. The per-head gates'
// exp and log1p stay scalar libm calls.
//
// Everything here has internal linkage, so that each ISA's copy stays its own; builtins stand
// in for <cmath>'s inline wrappers (see formats/act_quant.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/deltanet.h"

namespace mx::deltanet_detail {
namespace {

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline float softplus1(float x) { return x > 20.0f ? x : __builtin_log1pf(__builtin_expf(x)); }

// y[j] = chain over m < cnt of fma(c[m], x[m * ldx + j], .) starting from init[j] (or 0),
// for j < n: one register chain per column, in m order, as the reference's loops.
template <class V, int NB>
inline void fma_rows_block(float* y, const float* init, const float* c, int64_t cnt, const float* x,
                           int64_t ldx) {
  typename V::T acc[NB];
  for (int b = 0; b < NB; ++b) {
    acc[b] = init != nullptr ? V::load(init + V::W * b) : V::zero();
  }
  for (int64_t m = 0; m < cnt; ++m) {
    const typename V::T cm = V::set1(c[m]);
    const float* xr = x + m * ldx;
    for (int b = 0; b < NB; ++b) acc[b] = V::fmadd(cm, V::load(xr + V::W * b), acc[b]);
  }
  for (int b = 0; b < NB; ++b) V::store(y + V::W * b, acc[b]);
}

template <class V>
void fma_rows(float* y, const float* init, int64_t n, const float* c, int64_t cnt, const float* x,
              int64_t ldx) {
  int64_t j = 0;
  for (; j + 4 * V::W <= n; j += 4 * V::W) {
    fma_rows_block<V, 4>(y + j, init != nullptr ? init + j : nullptr, c, cnt, x + j, ldx);
  }
  for (; j + V::W <= n; j += V::W) {
    fma_rows_block<V, 1>(y + j, init != nullptr ? init + j : nullptr, c, cnt, x + j, ldx);
  }
  for (; j < n; ++j) {
    float acc = init != nullptr ? init[j] : 0.0f;
    for (int64_t m = 0; m < cnt; ++m) acc = __builtin_fmaf(c[m], x[m * ldx + j], acc);
    y[j] = acc;
  }
}

// y[i] = silu(y[i]) for i < n, whole vectors then a zero-padded last one.
template <class V>
inline void silu_in_place(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, V::silu(V::load(y + i)));
  if (i < n) {
    alignas(64) float tmp[V::W] = {};
    for (int64_t j = i; j < n; ++j) tmp[j - i] = y[j];
    V::store(tmp, V::silu(V::load(tmp)));
    for (int64_t j = i; j < n; ++j) y[j] = tmp[j - i];
  }
}

template <class V>
void conv_silu(const ConvArgs& a) {
  const int64_t km1 = a.kernel - 1, nc = a.channels, lds = a.lds != 0 ? a.lds : nc;
  const int64_t cw = nc / V::W * V::W;
  alignas(64) float tmp[V::W];
  typename V::T wv[kConvMaxKernel], win[kConvMaxKernel];
  for (int64_t c = 0; c < cw; c += V::W) {
    for (int64_t j = 0; j < a.kernel; ++j) {
      for (int l = 0; l < V::W; ++l) tmp[l] = a.w[(c + l) * a.kernel + j];
      wv[j] = V::load(tmp);
    }
    for (int64_t j = 0; j < km1; ++j) win[j] = V::load(a.state + j * lds + c);
    for (int64_t t = 0; t < a.t; ++t) {
      win[km1] = V::load(a.x + t * a.ldx + c);
      typename V::T acc = V::mul(wv[0], win[0]);
      for (int64_t j = 1; j < a.kernel; ++j) acc = V::fmadd(wv[j], win[j], acc);
      V::store(a.y + t * a.ldy + c, V::silu(acc));
      for (int64_t j = 0; j < km1; ++j) win[j] = win[j + 1];
    }
    for (int64_t j = 0; j < km1; ++j) V::store(a.state + j * lds + c, win[j]);
  }
  float sw[kConvMaxKernel];
  for (int64_t c = cw; c < nc; ++c) {
    const float* w = a.w + c * a.kernel;
    for (int64_t j = 0; j < km1; ++j) sw[j] = a.state[j * lds + c];
    for (int64_t t = 0; t < a.t; ++t) {
      sw[km1] = a.x[t * a.ldx + c];
      float acc = w[0] * sw[0];
      for (int64_t j = 1; j < a.kernel; ++j) acc = __builtin_fmaf(w[j], sw[j], acc);
      a.y[t * a.ldy + c] = acc;
      for (int64_t j = 0; j < km1; ++j) sw[j] = sw[j + 1];
    }
    for (int64_t j = 0; j < km1; ++j) a.state[j * lds + c] = sw[j];
  }
  // The last channels' SiLU through the same vector function, so that a channel's result does
  // not depend on where a call's channels end.
  if (cw < nc) {
    for (int64_t t = 0; t < a.t; ++t) silu_in_place<V>(a.y + t * a.ldy + cw, nc - cw);
  }
}

// One token on columns [0, 8 NB) of a head's state s (row stride dv): pass 1 reads the block
// (decay and kv), pass 2 re-reads it from L1, recomputing the same decayed values, and writes
// the update; so the state leaves and reaches memory once per token.
template <class V, int NB>
inline void recurrent_block(float* s, int64_t dk, int64_t dv, const float* k, const float* q,
                            const float* v, typename V::T ev, typename V::T bv, float* o) {
  typename V::T kv[NB], d[NB];
  for (int b = 0; b < NB; ++b) kv[b] = V::zero();
  for (int64_t i = 0; i < dk; ++i) {
    const typename V::T ki = V::set1(k[i]);
    const float* r = s + i * dv;
    for (int b = 0; b < NB; ++b) {
      kv[b] = V::fmadd(V::mul(V::load(r + V::W * b), ev), ki, kv[b]);
    }
  }
  for (int b = 0; b < NB; ++b) {
    d[b] = V::mul(V::sub(V::load(v + V::W * b), kv[b]), bv);
    kv[b] = V::zero();  // now the output accumulator
  }
  for (int64_t i = 0; i < dk; ++i) {
    const typename V::T ki = V::set1(k[i]), qi = V::set1(q[i]);
    float* r = s + i * dv;
    for (int b = 0; b < NB; ++b) {
      const typename V::T sn = V::fmadd(ki, d[b], V::mul(V::load(r + V::W * b), ev));
      V::store(r + V::W * b, sn);
      kv[b] = V::fmadd(sn, qi, kv[b]);
    }
  }
  for (int b = 0; b < NB; ++b) V::store(o + V::W * b, kv[b]);
}

template <class V>
void delta_rule_recurrent(const DeltaRuleArgs& a) {
  const int64_t group = a.nv / a.nk, dk = a.dk, dv = a.dv;
  for (int64_t t = 0; t < a.t; ++t) {
    for (int64_t h = 0; h < a.nv; ++h) {
      const float* q = a.q + t * a.ldq + (h / group) * dk;
      const float* k = a.k + t * a.ldk + (h / group) * dk;
      const float* v = a.v + t * a.ldv + h * dv;
      const float e = __builtin_expf(a.g[t * a.ldg + h]);
      const float beta = a.beta[t * a.ldg + h];
      const typename V::T ev = V::set1(e), bv = V::set1(beta);
      float* s = a.state + h * dk * dv;
      float* o = a.o + t * a.ldo + h * dv;
      int64_t j = 0;
      for (; j + 4 * V::W <= dv; j += 4 * V::W)
        recurrent_block<V, 4>(s + j, dk, dv, k, q, v + j, ev, bv, o + j);
      for (; j + V::W <= dv; j += V::W)
        recurrent_block<V, 1>(s + j, dk, dv, k, q, v + j, ev, bv, o + j);
      for (; j < dv; ++j) {
        float kv = 0.0f;
        for (int64_t i = 0; i < dk; ++i) kv = __builtin_fmaf(s[i * dv + j] * e, k[i], kv);
        const float d = (v[j] - kv) * beta;
        float acc = 0.0f;
        for (int64_t i = 0; i < dk; ++i) {
          const float sn = __builtin_fmaf(k[i], d, s[i * dv + j] * e);
          s[i * dv + j] = sn;
          acc = __builtin_fmaf(sn, q[i], acc);
        }
        o[j] = acc;
      }
    }
  }
}

struct ChunkBuffers {
  float *gc, *eg, *dm, *tm, *pm, *u, *w, *kt, *kb, *vb;
};

ChunkBuffers chunk_buffers(float* p, int64_t ld, int64_t dk, int64_t dv) {
  ChunkBuffers b;
  b.gc = p;
  b.eg = b.gc + ld;
  b.dm = b.eg + ld;
  b.tm = b.dm + ld;
  b.pm = b.tm + ld * ld;
  b.u = b.pm + ld * ld;
  b.w = b.u + ld * dv;
  b.kt = b.w + ld * dk;  // keys transposed [dk][ld], later k_m[r] * dm[m]
  b.kb = b.kt + dk * ld;
  b.vb = b.kb + ld * dk;  // beta v, later W S
  return b;
}

// fma_rows for R rows at once sharing the loads of x: row r writes y + r * ldy from init + r
// * ldi (or 0) with c + r * ldc over cnt + r * tri terms (tri 1: the triangular products, row i
// of which sums i + 1 terms), every column of every row the same chain as fma_rows gives it.
// One row a time, each m loaded NB vectors of x for NB FMAs: loads bounded the chunked rule's
// products (rows of 128 at Qwen3.5's widths).
template <class V, int R>
void fma_rows_multi(float* y, int64_t ldy, const float* init, int64_t ldi, int64_t n,
                    const float* c, int64_t ldc, int64_t cnt, int64_t tri, const float* x,
                    int64_t ldx) {
  constexpr int NB = V::W == 16 ? 4 : 2;  // R * NB accumulators within the vector registers
  using T = typename V::T;
  int64_t j = 0;
  for (; j + NB * V::W <= n; j += NB * V::W) {
    T acc[R][NB];
    for (int r = 0; r < R; ++r) {
      for (int b = 0; b < NB; ++b) {
        acc[r][b] = init != nullptr ? V::load(init + r * ldi + j + V::W * b) : V::zero();
      }
    }
    for (int64_t m = 0; m < cnt; ++m) {
      const float* xr = x + m * ldx + j;
      T xv[NB];
      for (int b = 0; b < NB; ++b) xv[b] = V::load(xr + V::W * b);
      for (int r = 0; r < R; ++r) {
        const T cm = V::set1(c[r * ldc + m]);
        for (int b = 0; b < NB; ++b) acc[r][b] = V::fmadd(cm, xv[b], acc[r][b]);
      }
    }
    for (int r = 1; r < R; ++r) {
      for (int64_t m = cnt; m < cnt + r * tri; ++m) {
        const T cm = V::set1(c[r * ldc + m]);
        for (int b = 0; b < NB; ++b) {
          acc[r][b] = V::fmadd(cm, V::load(x + m * ldx + j + V::W * b), acc[r][b]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int b = 0; b < NB; ++b) V::store(y + r * ldy + j + V::W * b, acc[r][b]);
    }
  }
  if (j < n) {
    for (int r = 0; r < R; ++r) {
      fma_rows<V>(y + r * ldy + j, init != nullptr ? init + r * ldi + j : nullptr, n - j,
                  c + r * ldc, cnt + r * tri, x + j, ldx);
    }
  }
}

// Rows [0, rows) of the product above, four at a time, then one at a time; row i sums cnt + i
// * tri terms.
template <class V>
void fma_rows_all(float* y, int64_t ldy, const float* init, int64_t ldi, int64_t rows, int64_t n,
                  const float* c, int64_t ldc, int64_t cnt, int64_t tri, const float* x,
                  int64_t ldx) {
  int64_t i = 0;
  for (; i + 4 <= rows; i += 4) {
    fma_rows_multi<V, 4>(y + i * ldy, ldy, init != nullptr ? init + i * ldi : nullptr, ldi, n,
                         c + i * ldc, ldc, cnt + i * tri, tri, x, ldx);
  }
  for (; i < rows; ++i) {
    fma_rows<V>(y + i * ldy, init != nullptr ? init + i * ldi : nullptr, n, c + i * ldc,
                cnt + i * tri, x, ldx);
  }
}

// T and P of the chunk (the reference's chunk_matrices): the dots k_i . k_m and q_i . k_m
// for all m <= i at once, from the transposed keys.
template <class V>
void chunk_matrices(const float* q, const float* k, int64_t ldq, int64_t ldk, const float* beta,
                    int64_t ldg, int64_t n, int64_t dk, int64_t ld, const ChunkBuffers& b) {
  for (int64_t m = 0; m < n; ++m) {
    for (int64_t r = 0; r < dk; ++r) b.kt[r * ld + m] = k[m * ldk + r];
  }
  // Rows four at a time over the group's last row's columns (i + 4): the columns past a row's
  // own i + 1 are zeroed below.
  int64_t i0 = 0;
  for (; i0 + 4 <= n; i0 += 4) {
    fma_rows_multi<V, 4>(b.tm + i0 * ld, ld, nullptr, 0, i0 + 4, k + i0 * ldk, ldk, dk, 0, b.kt,
                         ld);
    fma_rows_multi<V, 4>(b.pm + i0 * ld, ld, nullptr, 0, i0 + 4, q + i0 * ldq, ldq, dk, 0, b.kt,
                         ld);
  }
  for (int64_t i = i0; i < n; ++i) {
    fma_rows<V>(b.tm + i * ld, nullptr, i + 1, k + i * ldk, dk, b.kt, ld);
    fma_rows<V>(b.pm + i * ld, nullptr, i + 1, q + i * ldq, dk, b.kt, ld);
  }
  for (int64_t i = 0; i < n; ++i) {
    float* ti = b.tm + i * ld;
    float* pi = b.pm + i * ld;
    for (int64_t m = 0; m <= i; ++m) {
      const float dec = __builtin_expf(b.gc[i] - b.gc[m]);
      ti[m] = m == i ? 1.0f : -(beta[i * ldg] * ti[m]) * dec;
      pi[m] = pi[m] * dec;
    }
    for (int64_t m = i + 1; m < n; ++m) ti[m] = pi[m] = 0.0f;
  }
  // ti[j] = fma(ti[m], T[m][j], ti[j]) for j < m, m = 1 .. i - 1 in order: inline, where a
  // call per (i, m) (2,016 a chunk) cost more than its few FMAs.
  for (int64_t i = 2; i < n; ++i) {
    float* ti = b.tm + i * ld;
    for (int64_t m = 1; m < i; ++m) {
      const float* tm = b.tm + m * ld;
      const typename V::T cm = V::set1(ti[m]);
      int64_t j = 0;
      for (; j + V::W <= m; j += V::W)
        V::store(ti + j, V::fmadd(cm, V::load(tm + j), V::load(ti + j)));
      for (; j < m; ++j) ti[j] = __builtin_fmaf(ti[m], tm[j], ti[j]);
    }
  }
}

template <class V>
void chunk(const DeltaRuleArgs& a, int64_t t0, int64_t n, int64_t h, float* scratch) {
  const int64_t ld = min64(a.t, kDeltaChunk), dk = a.dk, dv = a.dv;
  const int64_t kh = h / (a.nv / a.nk);
  const float* q = a.q + t0 * a.ldq + kh * dk;
  const float* k = a.k + t0 * a.ldk + kh * dk;
  const float* v = a.v + t0 * a.ldv + h * dv;
  const float* g = a.g + t0 * a.ldg + h;
  const float* beta = a.beta + t0 * a.ldg + h;
  float* s = a.state + h * dk * dv;
  const ChunkBuffers b = chunk_buffers(scratch, ld, dk, dv);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) b.gc[i] = acc = acc + g[i * a.ldg];
  for (int64_t i = 0; i < n; ++i) {
    b.eg[i] = __builtin_expf(b.gc[i]);
    b.dm[i] = __builtin_expf(b.gc[n - 1] - b.gc[i]);
  }
  chunk_matrices<V>(q, k, a.ldq, a.ldk, beta, a.ldg, n, dk, ld, b);
  for (int64_t m = 0; m < n; ++m) {
    const float bm = beta[m * a.ldg], bk = bm * b.eg[m];
    for (int64_t j = 0; j < dv; ++j) b.vb[m * dv + j] = bm * v[m * a.ldv + j];
    for (int64_t j = 0; j < dk; ++j) b.kb[m * dk + j] = bk * k[m * a.ldk + j];
  }
  fma_rows_all<V>(b.u, dv, nullptr, 0, n, dv, b.tm, ld, 1, 1, b.vb, dv);
  fma_rows_all<V>(b.w, dk, nullptr, 0, n, dk, b.tm, ld, 1, 1, b.kb, dk);
  // beta v is consumed: W S goes there.
  fma_rows_all<V>(b.vb, dv, nullptr, 0, n, dv, b.w, dk, dk, 0, s, dv);
  for (int64_t i = 0; i < n; ++i) {
    const float* ws = b.vb + i * dv;
    float* ui = b.u + i * dv;
    int64_t j = 0;
    for (; j + V::W <= dv; j += V::W) {
      V::store(ui + j, V::sub(V::load(ui + j), V::load(ws + j)));
    }
    for (; j < dv; ++j) ui[j] = ui[j] - ws[j];
  }
  fma_rows_all<V>(a.o + t0 * a.ldo + h * dv, a.ldo, nullptr, 0, n, dv, q, a.ldq, dk, 0, s, dv);
  float* o0 = a.o + t0 * a.ldo + h * dv;
  for (int64_t i = 0; i < n; ++i) {
    float* o = o0 + i * a.ldo;
    const typename V::T e = V::set1(b.eg[i]);
    int64_t j = 0;
    for (; j + V::W <= dv; j += V::W) V::store(o + j, V::mul(V::load(o + j), e));
    for (; j < dv; ++j) o[j] = o[j] * b.eg[i];
  }
  fma_rows_all<V>(o0, a.ldo, o0, a.ldo, n, dv, b.pm, ld, 1, 1, b.u, dv);
  for (int64_t r = 0; r < dk; ++r) {
    for (int64_t m = 0; m < n; ++m) b.kt[r * ld + m] = k[m * a.ldk + r] * b.dm[m];
  }
  const typename V::T el = V::set1(b.eg[n - 1]);
  for (int64_t r = 0; r < dk; ++r) {
    float* sr = s + r * dv;
    int64_t j = 0;
    for (; j + V::W <= dv; j += V::W) V::store(sr + j, V::mul(V::load(sr + j), el));
    for (; j < dv; ++j) sr[j] = sr[j] * b.eg[n - 1];
  }
  fma_rows_all<V>(s, dv, s, dv, dk, dv, b.kt, ld, n, 0, b.u, dv);
}

template <class V>
void delta_rule_chunked(const DeltaRuleArgs& a, float* scratch) {
  for (int64_t h = 0; h < a.nv; ++h) {
    for (int64_t t0 = 0; t0 < a.t; t0 += kDeltaChunk) {
      chunk<V>(a, t0, min64(kDeltaChunk, a.t - t0), h, scratch);
    }
  }
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Sum of squares in eight lanes reduced by hsum, then the tail in order.
inline float sum_squares(const float* x, int64_t n) {
  const int64_t n8 = n & ~int64_t{7};
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  float ss = hsum(acc);
  for (int64_t i = n8; i < n; ++i) ss = __builtin_fmaf(x[i], x[i], ss);
  return ss;
}

template <class V>
void l2_norm(float* x, int64_t t, int64_t heads, int64_t dim, int64_t ld, float scale) {
  const int64_t nw = dim / V::W * V::W;
  const typename V::T sc = V::set1(scale);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* p = x + r * ld + hd * dim;
      const float inv = 1.0f / __builtin_sqrtf(sum_squares(p, dim) + kL2NormEps);
      const typename V::T iv = V::set1(inv);
      for (int64_t i = 0; i < nw; i += V::W) {
        V::store(p + i, V::mul(V::mul(V::load(p + i), iv), sc));
      }
      for (int64_t i = nw; i < dim; ++i) p[i] = p[i] * inv * scale;
    }
  }
}

// The reference's w * (x * inv) * silu(z) per value, the SiLU by V; the last partial vector
// through zero-padded copies.
template <class V>
void gated_rms_norm(const float* x, const float* z, const float* w, int64_t rows, int64_t dim,
                    float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* zr = z + r * dim;
    const float inv = 1.0f / __builtin_sqrtf(sum_squares(xr, dim) / static_cast<float>(dim) + eps);
    const typename V::T iv = V::set1(inv);
    float* yr = y + r * dim;
    auto one = [&](const float* wp, const float* xp, const float* zp, float* yp) {
      V::store(yp, V::mul(V::mul(V::load(wp), V::mul(V::load(xp), iv)), V::silu(V::load(zp))));
    };
    int64_t i = 0;
    for (; i + V::W <= dim; i += V::W) one(w + i, xr + i, zr + i, yr + i);
    if (i < dim) {
      alignas(64) float pw[V::W] = {}, px[V::W] = {}, pz[V::W] = {}, py[V::W];
      for (int64_t j = i; j < dim; ++j) {
        pw[j - i] = w[j];
        px[j - i] = xr[j];
        pz[j - i] = zr[j];
      }
      one(pw, px, pz, py);
      for (int64_t j = i; j < dim; ++j) yr[j] = py[j - i];
    }
  }
}

// The elementwise gates are libm-bound; the reference's per-value formulas, unchanged.
void sigmoid(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + __builtin_expf(-x[i]));
}

void softplus(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = softplus1(x[i]);
}

void decay_gate(const float* a, int64_t lda, const float* dt_bias, const float* a_log, int64_t t,
                int64_t nv, float* g) {
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t h = 0; h < nv; ++h) {
      g[r * nv + h] = -__builtin_expf(a_log[h]) * softplus1(a[r * lda + h] + dt_bias[h]);
    }
  }
}

}  // namespace
}  // namespace mx::deltanet_detail
