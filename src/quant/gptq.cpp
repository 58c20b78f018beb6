#include "quant/gptq.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "core/thread_pool.h"
#include "formats/half.h"
#include "formats/mx_layout.h"

// LAPACK's Cholesky factorization and inverse (Fortran symbols; the trailing length is that
// of the `uplo` string argument).
extern "C" {
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t);
void dpotri_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t);
void dpotrs_(const char* uplo, const int* n, const int* nrhs, const double* a, const int* lda,
             double* b, const int* ldb, int* info, size_t);
}

namespace mx {
namespace {

// Row-major symmetric matrices read the same column-major, so LAPACK's lower factor L of a
// column-major A is, read row-major, the upper factor U = L^T with A = U^T U.
bool cholesky_upper(std::vector<double>& a, int64_t k) {
  const int n = static_cast<int>(k);
  int info = 0;
  dpotrf_("L", &n, a.data(), &n, &info, 1);
  if (info != 0) return false;
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < i; ++j) a[static_cast<size_t>(i * k + j)] = 0.0;
  }
  return true;
}

bool inverse_spd(std::vector<double>& a, int64_t k) {
  const int n = static_cast<int>(k);
  int info = 0;
  dpotrf_("L", &n, a.data(), &n, &info, 1);
  if (info != 0) return false;
  dpotri_("L", &n, a.data(), &n, &info, 1);
  if (info != 0) return false;
  // The inverse is in the row-major upper triangle; mirror it.
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < i; ++j)
      a[static_cast<size_t>(i * k + j)] = a[static_cast<size_t>(j * k + i)];
  }
  return true;
}

struct Format {
  ElemFormat elem;
  bool dual;
  ScaleRule rule;  // of the E8M0 scales (dual level: always floor)
};

float dual_scale_of(const float* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax / 6.0f;
}

float dual_element(float x, float s0) { return s0 == 0.0f ? 0.0f : round_to_bf16(x / s0); }

uint8_t block_scale_of(const float* x, int64_t n, float s0, const Format& f) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    amax = std::max(amax, std::fabs(f.dual ? dual_element(x[i], s0) : x[i]));
  return mx_scale_byte(amax, f.elem, f.rule);
}

// The codec's code for x under scale byte `sc` (and chunk scale s0), and its value.
float quantize_value(float x, uint8_t sc, float s0, const Format& f, uint8_t* code) {
  const float t = f.dual ? dual_element(x, s0) : x;
  const int e = e8m0_exponent(sc);
  *code = elem_encode(f.elem, std::ldexp(static_cast<double>(t), -e));
  const auto q = static_cast<float>(std::ldexp(static_cast<double>(elem_decode(f.elem, *code)), e));
  return f.dual ? q * s0 : q;
}

// One thread's rows [r0, r1): the column loop of the contract, in lazy batches.
struct RowsJob {
  const float* w;
  int64_t k;
  const std::vector<double>& u;
  const std::vector<int64_t>& perm;  // quantization order -> column
  bool dynamic;                      // scales chosen when reached (not act_order)
  bool search;                       // GptqOptions::scale_search
  int64_t batch;
  Format f;
  MxWeights* out;

  void run(int64_t r0, int64_t r1) const {
    const int64_t nr = r1 - r0, nb = mx_num_blocks(k), nc = mx_num_chunks(k);
    std::vector<double> cur(static_cast<size_t>(nr * k)), err(static_cast<size_t>(nr * batch));
    std::vector<float> xf(static_cast<size_t>(k));
    std::vector<uint8_t> codes(static_cast<size_t>(nr * k));
    std::vector<uint8_t> scales(static_cast<size_t>(nr * nb));
    std::vector<float> s0(static_cast<size_t>(nr * std::max<int64_t>(nc, 1)));
    for (int64_t r = 0; r < nr; ++r) {
      for (int64_t a = 0; a < k; ++a) cur[r * k + a] = w[(r0 + r) * k + perm[a]];
      if (!dynamic) static_scales(w + (r0 + r) * k, &scales[r * nb], &s0[r * nc]);
    }
    for (int64_t b0 = 0; b0 < k; b0 += batch) {
      const int64_t b1 = std::min(k, b0 + batch);
      for (int64_t a = b0; a < b1; ++a) {
        const int64_t col = perm[a];
        const double* ua = u.data() + a * k;
        for (int64_t r = 0; r < nr; ++r) {
          double* cr = &cur[r * k];
          if (dynamic) reach(cr, a, &scales[r * nb], &s0[r * nc], xf.data());
          const float q = quantize_value(static_cast<float>(cr[a]), scales[r * nb + col / kMxBlock],
                                         f.dual ? s0[r * nc + col / kMxDualChunk] : 0.0f, f,
                                         &codes[r * k + col]);
          const double e = (cr[a] - q) / ua[a];
          err[r * batch + (a - b0)] = e;
          for (int64_t j = a + 1; j < b1; ++j) cr[j] -= e * ua[j];
        }
      }
      if (b1 == k) break;
      for (int64_t r = 0; r < nr; ++r) {
        double* cr = &cur[r * k];
        for (int64_t a = b0; a < b1; ++a) {
          const double e = err[r * batch + (a - b0)];
          const double* ua = u.data() + a * k;
          for (int64_t j = b1; j < k; ++j) cr[j] -= e * ua[j];
        }
      }
    }
    write(r0, nr, codes, scales, s0);
  }

  // Dynamic scales: a chunk's and a block's, from the row's current values, when reached.
  // With `search`, the block takes the codec's exponent or the one above, whichever leaves the
  // smaller GPTQ loss sum(((w - q) / U[i][i])^2) over the block's columns.
  void reach(const double* cr, int64_t a, uint8_t* scales, float* s0, float* xf) const {
    if (a % kMxBlock != 0) return;
    if (f.dual && a % kMxDualChunk == 0) {
      const int64_t n = std::min<int64_t>(kMxDualChunk, k - a);
      for (int64_t j = 0; j < n; ++j) xf[j] = static_cast<float>(cr[a + j]);
      s0[a / kMxDualChunk] = dual_scale_of(xf, n);
    }
    const int64_t n = std::min<int64_t>(kMxBlock, k - a);
    for (int64_t j = 0; j < n; ++j) xf[j] = static_cast<float>(cr[a + j]);
    const float c0 = f.dual ? s0[a / kMxDualChunk] : 0.0f;
    const uint8_t e0 = block_scale_of(xf, n, c0, f);
    scales[a / kMxBlock] = e0;
    if (!search || e0 == 0 || e0 >= 254) return;
    const double keep = block_loss(cr, a, n, e0, c0);
    if (block_loss(cr, a, n, static_cast<uint8_t>(e0 + 1), c0) < keep)
      scales[a / kMxBlock] = static_cast<uint8_t>(e0 + 1);
  }

  // The loss of quantizing columns [a, a + n) under scale byte `sc`, errors carried within.
  double block_loss(const double* cr, int64_t a, int64_t n, uint8_t sc, float c0) const {
    double t[kMxBlock];
    for (int64_t j = 0; j < n; ++j) t[j] = cr[a + j];
    double loss = 0.0;
    uint8_t code = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double* uj = u.data() + (a + j) * k + a;
      const double e = (t[j] - quantize_value(static_cast<float>(t[j]), sc, c0, f, &code)) / uj[j];
      loss += e * e;
      for (int64_t i = j + 1; i < n; ++i) t[i] -= e * uj[i];
    }
    return loss;
  }

  // Static scales: every chunk's and block's from the unquantized row.
  void static_scales(const float* row, uint8_t* scales, float* s0) const {
    for (int64_t c = 0; f.dual && c * kMxDualChunk < k; ++c)
      s0[c] = dual_scale_of(row + c * kMxDualChunk,
                            std::min<int64_t>(kMxDualChunk, k - c * kMxDualChunk));
    for (int64_t b = 0; b * kMxBlock < k; ++b) {
      const int64_t c0 = b * kMxBlock;
      scales[b] = block_scale_of(row + c0, std::min<int64_t>(kMxBlock, k - c0),
                                 f.dual ? s0[c0 / kMxDualChunk] : 0.0f, f);
    }
  }

  void write(int64_t r0, int64_t nr, const std::vector<uint8_t>& codes,
             const std::vector<uint8_t>& scales, const std::vector<float>& s0) const {
    const int64_t nb = mx_num_blocks(k), nc = mx_num_chunks(k), rb = out->row_bytes();
    for (int64_t r = 0; r < nr; ++r) {
      uint8_t* dst = out->codes.mutable_data_as<uint8_t>() + (r0 + r) * rb;
      if (f.elem == ElemFormat::kE2M1) {
        fp4_pack(&codes[r * k], k, Fp4Order::kAdjacent, dst);
      } else {
        std::memcpy(dst, &codes[r * k], static_cast<size_t>(k));
      }
      std::memcpy(out->scales.mutable_data_as<uint8_t>() + (r0 + r) * nb, &scales[r * nb],
                  static_cast<size_t>(nb));
      if (f.dual) {
        std::memcpy(out->chunk_scales.mutable_data_as<float>() + (r0 + r) * nc, &s0[r * nc],
                    static_cast<size_t>(nc) * sizeof(float));
      }
    }
  }
};

}  // namespace

Hessian::Hessian(int64_t k) : k_(k), upper_(static_cast<size_t>(k * k), 0.0) {}

void Hessian::add(const float* x, int64_t m, ThreadPool* pool) {
  constexpr int64_t kRows = 64;
  std::vector<double> xd(static_cast<size_t>(kRows * k_));
  for (int64_t m0 = 0; m0 < m; m0 += kRows) {
    const int64_t mr = std::min(kRows, m - m0);
    for (int64_t i = 0; i < mr * k_; ++i) xd[i] = x[m0 * k_ + i];
    auto row = [&](int64_t i) {
      double* hi = &upper_[i * k_];
      for (int64_t r = 0; r < mr; ++r) {
        const double* xr = &xd[r * k_];
        const double v = xr[i];
        if (v == 0.0) continue;
        for (int64_t j = i; j < k_; ++j) hi[j] += v * xr[j];
      }
    };
    // Row i of the triangle costs k - i; pairing i with k - 1 - i evens the threads' shares.
    auto pairs = [&](int64_t p0, int64_t p1, int) {
      for (int64_t p = p0; p < p1; ++p) {
        row(p);
        if (k_ - 1 - p != p) row(k_ - 1 - p);
      }
    };
    const int64_t np = (k_ + 1) / 2;
    if (pool == nullptr || pool->num_threads() == 1 || k_ < 64) {
      pairs(0, np, 0);
    } else {
      pool->parallel_for(np, pairs);
    }
  }
  rows_ += m;
}

void Hessian::add(const Hessian& other) {
  MX_CHECK(other.k_ == k_);
  for (size_t i = 0; i < upper_.size(); ++i) upper_[i] += other.upper_[i];
  rows_ += other.rows_;
}

std::vector<double> Hessian::matrix() const {
  std::vector<double> h = upper_;
  for (int64_t i = 0; i < k_; ++i) {
    for (int64_t j = 0; j < i; ++j) h[i * k_ + j] = h[j * k_ + i];
  }
  return h;
}

void CrossMoments::add(const float* x, const float* y, int64_t m, ThreadPool* pool) {
  auto rows = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      double* ci = &c_[static_cast<size_t>(i * k_)];
      for (int64_t r = 0; r < m; ++r) {
        const double v = x[r * k_ + i];
        if (v == 0.0) continue;
        const float* yr = y + r * k_;
        for (int64_t j = 0; j < k_; ++j) ci[j] += v * static_cast<double>(yr[j]);
      }
    }
  };
  if (pool == nullptr || pool->num_threads() == 1 || k_ < 64) {
    rows(0, k_, 0);
  } else {
    pool->parallel_for(k_, rows);
  }
}

void CrossMoments::add(const CrossMoments& other) {
  MX_CHECK(other.k_ == k_);
  for (size_t i = 0; i < c_.size(); ++i) c_[i] += other.c_[i];
}

Result<std::vector<float>> input_aware_weights(const float* w, int64_t n, int64_t k,
                                               const std::vector<double>& cross,
                                               const std::vector<double>& hy, double damp,
                                               ThreadPool* pool) {
  std::vector<double> a = hy;
  double mean = 0.0;
  for (int64_t i = 0; i < k; ++i) mean += hy[i * k + i];
  mean = mean > 0.0 ? mean / static_cast<double>(k) : 1.0;
  // Damped toward w, not toward zero: (C + d) (Hy + d)^-1 is the identity where the inputs
  // never reached.
  std::vector<double> mt = cross;
  for (int64_t i = 0; i < k; ++i) {
    a[i * k + i] += damp * mean;
    mt[i * k + i] += damp * mean;
  }
  // M = C A^-1, so A M^T = C^T: the right-hand sides are C's rows read column-major.
  const int kk = static_cast<int>(k);
  int info = 0;
  dpotrf_("L", &kk, a.data(), &kk, &info, 1);
  if (info == 0) dpotrs_("L", &kk, &kk, a.data(), &kk, mt.data(), &kk, &info, 1);
  if (info != 0) return invalid_argument("the quantized inputs' Hessian is not positive definite");
  // Column-major M^T is row-major M: w' = w M.
  std::vector<float> out(static_cast<size_t>(n * k));
  auto rows = [&](int64_t r0, int64_t r1, int) {
    std::vector<double> acc(static_cast<size_t>(k));
    for (int64_t r = r0; r < r1; ++r) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t i = 0; i < k; ++i) {
        const double v = w[r * k + i];
        const double* mi = &mt[static_cast<size_t>(i * k)];
        for (int64_t j = 0; j < k; ++j) acc[j] += v * mi[j];
      }
      for (int64_t j = 0; j < k; ++j) out[r * k + j] = static_cast<float>(acc[j]);
    }
  };
  if (pool == nullptr) {
    rows(0, n, 0);
  } else {
    pool->parallel_for(n, rows);
  }
  return out;
}

Result<std::vector<double>> gptq_inverse_factor(const std::vector<double>& h, int64_t k,
                                                double damp, const std::vector<int64_t>* perm) {
  std::vector<double> a(static_cast<size_t>(k * k));
  double mean = 0.0;
  for (int64_t i = 0; i < k; ++i) mean += h[i * k + i];
  mean /= static_cast<double>(k);
  // An input that never varied (a zero diagonal) still needs a pivot.
  if (!(mean > 0.0)) mean = 1.0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t pi = perm != nullptr ? (*perm)[i] : i;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t pj = perm != nullptr ? (*perm)[j] : j;
      a[i * k + j] = h[pi * k + pj];
    }
    a[i * k + i] += damp * mean;
  }
  if (!inverse_spd(a, k) || !cholesky_upper(a, k)) {
    return invalid_argument("the damped Hessian is not positive definite");
  }
  return a;
}

Result<MxWeights> gptq_quantize(const float* w, int64_t n, int64_t k, const std::vector<double>& h,
                                Scheme scheme, ScaleRule rule, const GptqOptions& opt,
                                ThreadPool* pool, const std::string& name) {
  const SchemeInfo& info = scheme_info(scheme);
  if (scheme == Scheme::kBf16) return invalid_argument(name + ": bf16 is not an MX scheme");
  if (opt.batch <= 0 || opt.batch % kMxBlock != 0 || kMxDualChunk % opt.batch != 0) {
    return invalid_argument(name + ": the GPTQ batch must be a multiple of 32 dividing 512");
  }
  if (static_cast<int64_t>(h.size()) != k * k) {
    return invalid_argument(name + ": the Hessian is not " + std::to_string(k) + " x " +
                            std::to_string(k));
  }
  for (int64_t i = 0; i < n * k; ++i) {
    if (!std::isfinite(w[i])) return invalid_argument(name + ": a weight is not finite");
  }
  std::vector<int64_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  if (opt.act_order) {
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return h[a * k + a] > h[b * k + b]; });
  }
  auto u = gptq_inverse_factor(h, k, opt.damp, opt.act_order ? &perm : nullptr);
  if (!u.is_ok()) return invalid_argument(name + ": " + u.status().message());
  MxWeights q;
  q.scheme = scheme;
  q.n = n;
  q.k = k;
  q.codes = Tensor::empty(DType::kU8, {n, q.row_bytes()});
  q.scales = Tensor::empty(DType::kU8, {n, mx_num_blocks(k)});
  if (info.dual) q.chunk_scales = Tensor::empty(DType::kF32, {n, mx_num_chunks(k)});
  const Format f{info.weight, info.dual, info.dual ? ScaleRule::kFloor : rule};
  const RowsJob job{w, k, *u, perm, !opt.act_order, opt.scale_search, opt.batch, f, &q};
  constexpr int64_t kRowsPerJob = 8;
  const int64_t jobs = (n + kRowsPerJob - 1) / kRowsPerJob;
  auto body = [&](int64_t j0, int64_t j1, int) {
    for (int64_t j = j0; j < j1; ++j) job.run(j * kRowsPerJob, std::min(n, (j + 1) * kRowsPerJob));
  };
  if (pool == nullptr) {
    body(0, jobs, 0);
  } else {
    pool->parallel_for(jobs, body);
  }
  return q;
}

}  // namespace mx
