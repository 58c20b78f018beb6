// Scalar references of the gated DeltaNet kernels and the per-ISA dispatch. The operation
// order here is the contract the AVX2 kernels reproduce bit for bit (kernels/deltanet.h):
// every dot product is one FMA chain in index order, every exp / log1p a libm call per value.
#include "kernels/deltanet.h"

#include <algorithm>
#include <cmath>

#include "core/isa_table.h"

namespace mx {
namespace deltanet_detail {
namespace {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid1(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus1(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void conv_silu_reference(const ConvArgs& a) {
  const int64_t km1 = a.kernel - 1, lds = a.lds != 0 ? a.lds : a.channels;
  float win[kConvMaxKernel];
  for (int64_t c = 0; c < a.channels; ++c) {
    const float* w = a.w + c * a.kernel;
    for (int64_t j = 0; j < km1; ++j) win[j] = a.state[j * lds + c];
    for (int64_t t = 0; t < a.t; ++t) {
      win[km1] = a.x[t * a.ldx + c];  // read before y (which may alias x) is written
      float acc = w[0] * win[0];
      for (int64_t j = 1; j < a.kernel; ++j) acc = std::fma(w[j], win[j], acc);
      a.y[t * a.ldy + c] = silu(acc);
      for (int64_t j = 0; j < km1; ++j) win[j] = win[j + 1];
    }
    for (int64_t j = 0; j < km1; ++j) a.state[j * lds + c] = win[j];
  }
}

void delta_rule_recurrent_reference(const DeltaRuleArgs& a) {
  const int64_t group = a.nv / a.nk;
  for (int64_t t = 0; t < a.t; ++t) {
    for (int64_t h = 0; h < a.nv; ++h) {
      const float* q = a.q + t * a.ldq + (h / group) * a.dk;
      const float* k = a.k + t * a.ldk + (h / group) * a.dk;
      const float* v = a.v + t * a.ldv + h * a.dv;
      const float e = std::exp(a.g[t * a.ldg + h]);
      const float beta = a.beta[t * a.ldg + h];
      float* s = a.state + h * a.dk * a.dv;
      float* o = a.o + t * a.ldo + h * a.dv;
      // Column j of S depends only on column j: decay and kv, then the update and o.
      for (int64_t j = 0; j < a.dv; ++j) {
        float kv = 0.0f;
        for (int64_t i = 0; i < a.dk; ++i) kv = std::fma(s[i * a.dv + j] * e, k[i], kv);
        const float d = (v[j] - kv) * beta;
        float acc = 0.0f;
        for (int64_t i = 0; i < a.dk; ++i) {
          const float sn = std::fma(k[i], d, s[i * a.dv + j] * e);
          s[i * a.dv + j] = sn;
          acc = std::fma(sn, q[i], acc);
        }
        o[j] = acc;
      }
    }
  }
}

// The intra-chunk matrices of one head's chunk of n tokens (ld = scratch row length):
// tm = T = (I + B)^-1 (unit lower triangular), pm[i][m] = (q_i . k_m) exp(G_i - G_m), m <= i.
void chunk_matrices(const float* q, const float* k, int64_t ldq, int64_t ldk, const float* beta,
                    int64_t ldg, const float* gc, int64_t n, int64_t dk, int64_t ld, float* tm,
                    float* pm) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t m = 0; m <= i; ++m) {
      float kk = 0.0f, qk = 0.0f;
      for (int64_t x = 0; x < dk; ++x) {
        kk = std::fma(k[i * ldk + x], k[m * ldk + x], kk);
        qk = std::fma(q[i * ldq + x], k[m * ldk + x], qk);
      }
      const float dec = std::exp(gc[i] - gc[m]);
      tm[i * ld + m] = m == i ? 1.0f : -(beta[i * ldg] * kk) * dec;
      pm[i * ld + m] = qk * dec;
    }
    for (int64_t m = i + 1; m < n; ++m) tm[i * ld + m] = pm[i * ld + m] = 0.0f;
  }
  // Forward substitution in place: row i += A[i][m] * row m, m ascending (A[i][m] is still
  // unmodified when it is used, as only entries left of m have changed).
  for (int64_t i = 2; i < n; ++i) {
    for (int64_t m = 1; m < i; ++m) {
      const float c = tm[i * ld + m];
      for (int64_t j = 0; j < m; ++j) tm[i * ld + j] = std::fma(c, tm[m * ld + j], tm[i * ld + j]);
    }
  }
}

// One chunk of n tokens of value head h, state s updated in place.
void chunk_reference(const DeltaRuleArgs& a, int64_t t0, int64_t n, int64_t h, float* scratch) {
  const int64_t ld = std::min(a.t, kDeltaChunk), dk = a.dk, dv = a.dv;
  const int64_t kh = h / (a.nv / a.nk);
  const float* q = a.q + t0 * a.ldq + kh * dk;
  const float* k = a.k + t0 * a.ldk + kh * dk;
  const float* v = a.v + t0 * a.ldv + h * dv;
  const float* g = a.g + t0 * a.ldg + h;
  const float* beta = a.beta + t0 * a.ldg + h;
  float* s = a.state + h * dk * dv;
  float* gc = scratch;
  float* eg = gc + ld;
  float* dm = eg + ld;
  float* tm = dm + ld;
  float* pm = tm + ld * ld;
  float* u = pm + ld * ld;  // U = T (beta v), then V_new = U - W S
  float* w = u + ld * dv;   // W = T (beta exp(G) k)
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) gc[i] = acc = acc + g[i * a.ldg];
  for (int64_t i = 0; i < n; ++i) {
    eg[i] = std::exp(gc[i]);
    dm[i] = std::exp(gc[n - 1] - gc[i]);
  }
  chunk_matrices(q, k, a.ldq, a.ldk, beta, a.ldg, gc, n, dk, ld, tm, pm);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dv; ++j) {
      float x = 0.0f;
      for (int64_t m = 0; m <= i; ++m)
        x = std::fma(tm[i * ld + m], beta[m * a.ldg] * v[m * a.ldv + j], x);
      u[i * dv + j] = x;
    }
    for (int64_t j = 0; j < dk; ++j) {
      float x = 0.0f;
      for (int64_t m = 0; m <= i; ++m) {
        x = std::fma(tm[i * ld + m], (beta[m * a.ldg] * eg[m]) * k[m * a.ldk + j], x);
      }
      w[i * dk + j] = x;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < dv; ++j) {
      float x = 0.0f;
      for (int64_t r = 0; r < dk; ++r) x = std::fma(w[i * dk + r], s[r * dv + j], x);
      u[i * dv + j] = u[i * dv + j] - x;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    float* o = a.o + (t0 + i) * a.ldo + h * dv;
    for (int64_t j = 0; j < dv; ++j) {
      float x = 0.0f;
      for (int64_t r = 0; r < dk; ++r) x = std::fma(q[i * a.ldq + r], s[r * dv + j], x);
      x = x * eg[i];
      for (int64_t m = 0; m <= i; ++m) x = std::fma(pm[i * ld + m], u[m * dv + j], x);
      o[j] = x;
    }
  }
  for (int64_t r = 0; r < dk; ++r) {
    for (int64_t j = 0; j < dv; ++j) {
      float x = s[r * dv + j] * eg[n - 1];
      for (int64_t m = 0; m < n; ++m) x = std::fma(k[m * a.ldk + r] * dm[m], u[m * dv + j], x);
      s[r * dv + j] = x;
    }
  }
}

void delta_rule_chunked_reference(const DeltaRuleArgs& a, float* scratch) {
  for (int64_t h = 0; h < a.nv; ++h) {
    for (int64_t t0 = 0; t0 < a.t; t0 += kDeltaChunk) {
      chunk_reference(a, t0, std::min(kDeltaChunk, a.t - t0), h, scratch);
    }
  }
}

void l2_norm_reference(float* x, int64_t t, int64_t heads, int64_t dim, int64_t ld, float scale) {
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t hd = 0; hd < heads; ++hd) {
      float* p = x + r * ld + hd * dim;
      float ss = 0.0f;
      for (int64_t i = 0; i < dim; ++i) ss = std::fma(p[i], p[i], ss);
      const float inv = 1.0f / std::sqrt(ss + kL2NormEps);
      for (int64_t i = 0; i < dim; ++i) p[i] = p[i] * inv * scale;
    }
  }
}

void gated_rms_norm_reference(const float* x, const float* z, const float* w, int64_t rows,
                              int64_t dim, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* zr = z + r * dim;
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss = std::fma(xr[i], xr[i], ss);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    float* yr = y + r * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv) * silu(zr[i]);
  }
}

void sigmoid_reference(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = sigmoid1(x[i]);
}

void softplus_reference(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = softplus1(x[i]);
}

void decay_gate_reference(const float* a, int64_t lda, const float* dt_bias, const float* a_log,
                          int64_t t, int64_t nv, float* g) {
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t h = 0; h < nv; ++h) {
      g[r * nv + h] = -std::exp(a_log[h]) * softplus1(a[r * lda + h] + dt_bias[h]);
    }
  }
}

}  // namespace

const DeltaNetKernels kScalarDeltaNet = {IsaLevel::kScalar,
                                         conv_silu_reference,
                                         delta_rule_recurrent_reference,
                                         delta_rule_chunked_reference,
                                         l2_norm_reference,
                                         gated_rms_norm_reference,
                                         sigmoid_reference,
                                         softplus_reference,
                                         decay_gate_reference};

}  // namespace deltanet_detail

int64_t delta_rule_chunked_scratch_floats(int64_t t, int64_t nv, int64_t dk, int64_t dv) {
  // gc, eg, dm; T and P; U and W; the AVX2 kernel's transposed keys (kt) and beta-scaled rows.
  // Heads reuse one layout, so nv does not enter.
  (void)nv;
  const int64_t n = std::min(t, kDeltaChunk);
  return 3 * n + 2 * n * n + n * dv + n * dk + n * dk + n * dk + n * dv;
}

namespace {
constexpr IsaTable<DeltaNetKernels> kDeltaNetKernelsTable{&deltanet_detail::kScalarDeltaNet,
                                                          &deltanet_detail::kAvx2DeltaNet,
                                                          &deltanet_detail::kAvx512DeltaNet};
}  // namespace

const DeltaNetKernels* deltanet_kernels_for(IsaLevel level) {
  return kDeltaNetKernelsTable.at(level);
}

const DeltaNetKernels& deltanet_kernels() {
  static const DeltaNetKernels& k = kDeltaNetKernelsTable.select();
  return k;
}

}  // namespace mx
