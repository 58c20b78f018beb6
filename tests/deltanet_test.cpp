// Every registered ISA variant of the gated DeltaNet kernels against references computed here
// in double, on odd shapes, with the error bounds kernels/deltanet.h derives (u = 2^-24), and
// against each other: the variants must equal the scalar table bit for bit where the header
// says so. Inputs come from a fixed seed, printed in every failure message.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/deltanet.h"

namespace mx {
namespace {

constexpr uint32_t kSeed = 20260517;
constexpr double kU = 0x1p-24;
const IsaLevel kLevels[] = {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512};

std::vector<const DeltaNetKernels*> variants() {
  std::vector<const DeltaNetKernels*> v;
  for (IsaLevel l : kLevels) {
    if (const DeltaNetKernels* k = deltanet_kernels_for(l)) v.push_back(k);
  }
  return v;
}

const DeltaNetKernels& scalar() { return *deltanet_kernels_for(IsaLevel::kScalar); }

std::vector<float> normal(size_t n, float sd, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> uniform(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double silu_d(double x) { return x / (1.0 + std::exp(-x)); }

// ---------------------------------------------------------------- conv1d + SiLU

TEST(DeltaNet, ConvEveryVariantMatchesDoubleAndChunksBitForBit) {
  for (const DeltaNetKernels* kern : variants()) {
    for (int64_t c : {1, 17, 512}) {
      for (int64_t kw : {1, 3, 4}) {
        for (int64_t t : {1, 7, 64, 65, 150}) {
          std::mt19937 rng(kSeed + static_cast<uint32_t>(c * 1000 + kw * 200 + t));
          const int64_t ldx = c + 3;
          const auto x = normal(static_cast<size_t>(t * ldx), 1.0f, rng);
          const auto w = normal(static_cast<size_t>(c * kw), 0.5f, rng);
          const auto st0 = normal(static_cast<size_t>((kw - 1) * c), 1.0f, rng);
          std::vector<float> y(static_cast<size_t>(t * c), -7.0f), st = st0;
          kern->conv_silu({x.data(), w.data(), st.data(), y.data(), t, c, kw, ldx, c});
          const std::string where = std::string(isa_name(kern->isa)) + " C=" + std::to_string(c) +
                                    " K=" + std::to_string(kw) + " T=" + std::to_string(t) +
                                    " seed=" + std::to_string(kSeed);
          auto xin = [&](int64_t tt, int64_t ch) -> double {
            return tt >= 0 ? x[tt * ldx + ch] : st0[(tt + kw - 1) * c + ch];
          };
          for (int64_t tt = 0; tt < t; ++tt) {
            for (int64_t ch = 0; ch < c; ++ch) {
              double s = 0, mag = 0;
              for (int64_t j = 0; j < kw; ++j) {
                const double p = w[ch * kw + j] * xin(tt - (kw - 1) + j, ch);
                s += p;
                mag += std::fabs(p);
              }
              const double ref = silu_d(s);
              const double tol = 1.1 * (kw + 1) * kU * mag + 7 * kU * std::fabs(ref) + 1e-37;
              ASSERT_LE(std::fabs(y[tt * c + ch] - ref), tol)
                  << where << " t=" << tt << " c=" << ch;
            }
          }
          for (int64_t j = 0; j < kw - 1; ++j) {
            for (int64_t ch = 0; ch < c; ++ch) {
              ASSERT_EQ(st[j * c + ch], xin(t - (kw - 1) + j, ch)) << where << " state";
            }
          }
          // The scalar table's result: the same convolution bit for bit, then the SiLU (libm's
          // expf there, the vector polynomial here, each within 2 ulp): within 12 u.
          std::vector<float> ys(y.size()), sts = st0;
          scalar().conv_silu({x.data(), w.data(), sts.data(), ys.data(), t, c, kw, ldx, c});
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_LE(std::fabs(ys[i] - y[i]), 12 * kU * std::fabs(ys[i]) + 1e-37)
                << where << " " << i;
          }
          ASSERT_EQ(sts, st) << where;
          // In pieces (1, 2, 4, rest) carrying the state, and in place: bit for bit.
          std::vector<float> xp = x, stp = st0;
          for (int64_t t0 = 0, len = 1; t0 < t; t0 += len, len = std::min<int64_t>(len * 2, t)) {
            const int64_t n = std::min(len, t - t0);
            float* p = xp.data() + t0 * ldx;
            kern->conv_silu({p, w.data(), stp.data(), p, n, c, kw, ldx, ldx});
          }
          for (int64_t tt = 0; tt < t; ++tt) {
            for (int64_t ch = 0; ch < c; ++ch) {
              ASSERT_EQ(xp[tt * ldx + ch], y[tt * c + ch]) << where << " pieces t=" << tt;
            }
            for (int64_t ch = c; ch < ldx; ++ch) ASSERT_EQ(xp[tt * ldx + ch], x[tt * ldx + ch]);
          }
          ASSERT_EQ(stp, st) << where << " pieces state";
          // In channel slices (as threads split them: an odd first slice, then runs of 16),
          // each reading and writing its columns of the whole state: bit for bit.
          std::vector<float> yc(y.size(), -7.0f), stc = st0;
          for (int64_t c0 = 0, len = 5; c0 < c; c0 += len, len = 16) {
            const int64_t n = std::min(len, c - c0);
            kern->conv_silu({x.data() + c0, w.data() + c0 * kw, stc.data() + c0, yc.data() + c0, t,
                             n, kw, ldx, c, c});
          }
          ASSERT_EQ(yc, y) << where << " channel slices";
          ASSERT_EQ(stc, st) << where << " channel slices state";
        }
      }
    }
  }
}

// ---------------------------------------------------------------- the delta rule

struct Shape {
  int64_t t, nk, nv, dk, dv;
};

std::string describe(const Shape& s) {
  return "T=" + std::to_string(s.t) + " nk=" + std::to_string(s.nk) +
         " nv=" + std::to_string(s.nv) + " dk=" + std::to_string(s.dk) +
         " dv=" + std::to_string(s.dv) + " seed=" + std::to_string(kSeed);
}

// Inputs laid out as a model has them: q, k, v side by side in one conv-output row, g and beta
// side by side in one row, outputs with a padded row.
struct Problem {
  Shape s;
  int64_t ldx, ldg, ldo;
  std::vector<float> qkv, gb, state0;

  Problem(const Shape& sh, bool zero_state) : s(sh) {
    std::mt19937 rng(kSeed + static_cast<uint32_t>(sh.t * 7919 + sh.nk * 131 + sh.nv * 17 +
                                                   sh.dk * 3 + sh.dv + (zero_state ? 1 : 0)));
    ldx = 2 * s.nk * s.dk + s.nv * s.dv;
    ldg = 2 * s.nv;
    ldo = s.nv * s.dv + 3;
    qkv = normal(static_cast<size_t>(s.t * ldx), 1.0f, rng);
    for (int64_t t = 0; t < s.t; ++t) {
      for (int64_t hd = 0; hd < 2 * s.nk; ++hd) {  // L2-normalize q and k in double
        float* p = &qkv[static_cast<size_t>(t * ldx + hd * s.dk)];
        double ss = 0;
        for (int64_t i = 0; i < s.dk; ++i) ss += static_cast<double>(p[i]) * p[i];
        const double f =
            (hd < s.nk ? 1.0 / std::sqrt(static_cast<double>(s.dk)) : 1.0) / std::sqrt(ss);
        for (int64_t i = 0; i < s.dk; ++i) p[i] = static_cast<float>(p[i] * f);
      }
    }
    gb.resize(static_cast<size_t>(s.t * ldg));
    std::uniform_real_distribution<float> gd(-5.0f, 0.0f), bd(0.0f, 1.0f);
    for (int64_t t = 0; t < s.t; ++t) {
      for (int64_t h = 0; h < s.nv; ++h) {
        float g = gd(rng);
        gb[t * ldg + h] = g < 0.0f ? g : -1e-3f;  // [-5, 0)
        float b = bd(rng);
        gb[t * ldg + s.nv + h] = b > 0.0f ? b : 0.5f;  // (0, 1)
      }
    }
    state0 = zero_state ? std::vector<float>(static_cast<size_t>(s.nv * s.dk * s.dv), 0.0f)
                        : normal(static_cast<size_t>(s.nv * s.dk * s.dv), 0.3f, rng);
  }
  const float* q(int64_t t, int64_t kh) const { return &qkv[t * ldx + kh * s.dk]; }
  const float* k(int64_t t, int64_t kh) const { return &qkv[t * ldx + (s.nk + kh) * s.dk]; }
  const float* v(int64_t t, int64_t h) const { return &qkv[t * ldx + 2 * s.nk * s.dk + h * s.dv]; }
  float g(int64_t t, int64_t h) const { return gb[t * ldg + h]; }
  float beta(int64_t t, int64_t h) const { return gb[t * ldg + s.nv + h]; }
  // Args for tokens [t0, t0 + n) on `state` and `o` (o of the whole sequence).
  DeltaRuleArgs args(int64_t t0, int64_t n, float* state, float* o) const {
    return {q(t0, 0), k(t0, 0),     v(t0, 0), &gb[t0 * ldg], &gb[t0 * ldg + s.nv],
            state,    o + t0 * ldo, n,        s.nk,          s.nv,
            s.dk,     s.dv,         ldx,      ldx,           ldx,
            ldg,      ldo};
  }
};

// The recurrence in double, with the norms the error bounds need.
struct Exact {
  std::vector<double> o, state;  // o [T, nv, dv]; final state
  std::vector<double> ns;        // ||S_t||_F per (t + 1, h); row 0: initial
  std::vector<double> no;        // ||o_t|| per (t, h)
};

Exact exact_recurrence(const Problem& p) {
  const Shape& s = p.s;
  Exact e;
  e.o.assign(static_cast<size_t>(s.t * s.nv * s.dv), 0.0);
  e.state.assign(p.state0.begin(), p.state0.end());
  e.ns.assign(static_cast<size_t>((s.t + 1) * s.nv), 0.0);
  e.no.assign(static_cast<size_t>(s.t * s.nv), 0.0);
  std::vector<double> kv(static_cast<size_t>(s.dv));
  for (int64_t h = 0; h < s.nv; ++h) {
    double* st = &e.state[h * s.dk * s.dv];
    double n0 = 0;
    for (int64_t i = 0; i < s.dk * s.dv; ++i) n0 += st[i] * st[i];
    e.ns[h] = std::sqrt(n0);
    const int64_t kh = h / (s.nv / s.nk);
    for (int64_t t = 0; t < s.t; ++t) {
      const float* q = p.q(t, kh);
      const float* k = p.k(t, kh);
      const float* v = p.v(t, h);
      const double dec = std::exp(static_cast<double>(p.g(t, h)));
      std::fill(kv.begin(), kv.end(), 0.0);
      for (int64_t i = 0; i < s.dk; ++i) {
        for (int64_t j = 0; j < s.dv; ++j) {
          st[i * s.dv + j] *= dec;
          kv[j] += st[i * s.dv + j] * k[i];
        }
      }
      double nsum = 0, osum = 0;
      for (int64_t j = 0; j < s.dv; ++j) {
        const double d = (v[j] - kv[j]) * p.beta(t, h);
        double o = 0;
        for (int64_t i = 0; i < s.dk; ++i) {
          double& x = st[i * s.dv + j];
          x += k[i] * d;
          nsum += x * x;
          o += x * q[i];
        }
        e.o[(t * s.nv + h) * s.dv + j] = o;
        osum += o * o;
      }
      e.ns[(t + 1) * s.nv + h] = std::sqrt(nsum);
      e.no[t * s.nv + h] = std::sqrt(osum);
    }
  }
  return e;
}

double vnorm(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return std::sqrt(s);
}

// kappa = max_i sum_m |T[i][m]| of the chunk [c0, c1) of head h, T = (I + B)^-1 in double.
double chunk_kappa(const Problem& p, int64_t h, int64_t c0, int64_t c1) {
  const int64_t n = c1 - c0, kh = h / (p.s.nv / p.s.nk);
  std::vector<double> gc(static_cast<size_t>(n)), tm(static_cast<size_t>(n * n), 0.0);
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) gc[i] = acc += p.g(c0 + i, h);
  std::vector<double> b(static_cast<size_t>(n * n), 0.0);  // B[i][l], l < i
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t l = 0; l < i; ++l) {
      double kk = 0;
      for (int64_t r = 0; r < p.s.dk; ++r) {
        kk += static_cast<double>(p.k(c0 + i, kh)[r]) * p.k(c0 + l, kh)[r];
      }
      b[i * n + l] = p.beta(c0 + i, h) * kk * std::exp(gc[i] - gc[l]);
    }
  }
  double kappa = 1;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t m = 0; m < i; ++m) {  // T[i][m] = -sum_{l in [m, i)} B[i][l] T[l][m]
      double x = 0;
      for (int64_t l = m; l < i; ++l) x -= b[i * n + l] * (l == m ? 1.0 : tm[l * n + m]);
      tm[i * n + m] = x;
    }
    double row = 1;
    for (int64_t m = 0; m < i; ++m) row += std::fabs(tm[i * n + m]);
    kappa = std::max(kappa, row);
  }
  return kappa;
}

// The header's bounds for a sequence processed as `segments` (length, chunked?) in order:
// per (t, h) the bound on ||do_t||, per h the bound on ||dS_T||_F.
struct Bounds {
  std::vector<double> out, state;
};

Bounds bounds(const Problem& p, const Exact& e, const std::vector<std::pair<int64_t, bool>>& segs) {
  const Shape& s = p.s;
  Bounds b;
  b.out.assign(static_cast<size_t>(s.t * s.nv), 0.0);
  b.state.assign(static_cast<size_t>(s.nv), 0.0);
  for (int64_t h = 0; h < s.nv; ++h) {
    const int64_t kh = h / (s.nv / s.nk);
    auto step = [&](int64_t t) {
      return e.ns[t * s.nv + h] + e.ns[(t + 1) * s.nv + h] + vnorm(p.v(t, h), s.dv);
    };
    auto out = [&](int64_t t, double err) {
      b.out[t * s.nv + h] =
          vnorm(p.q(t, kh), s.dk) * (err + (s.dk + 2) * kU * e.ns[(t + 1) * s.nv + h]) +
          kU * e.no[t * s.nv + h] + 1e-30;
    };
    double err = 0;
    int64_t t0 = 0;
    for (const auto& [len, chunked] : segs) {
      for (int64_t c0 = t0; c0 < t0 + len; c0 += chunked ? kDeltaChunk : 1) {
        const int64_t c1 = chunked ? std::min(c0 + kDeltaChunk, t0 + len) : c0 + 1;
        double sum = 0;
        for (int64_t t = c0; t < c1; ++t) sum += step(t);
        const double kappa = chunked ? chunk_kappa(p, h, c0, c1) : 1.0;
        err += (chunked ? s.dk + s.dv + 2 * kDeltaChunk + 8 : s.dk + 8) * kU * kappa * kappa * sum;
        for (int64_t t = c0; t < c1; ++t) out(t, err);
      }
      t0 += len;
    }
    b.state[h] = err;
  }
  return b;
}

struct Result {
  std::vector<float> o, state;
};

// Runs the segments in order with one kernel table, scratch sized per call exactly.
Result run(const DeltaNetKernels& kern, const Problem& p,
           const std::vector<std::pair<int64_t, bool>>& segs) {
  Result r{std::vector<float>(static_cast<size_t>(p.s.t * p.ldo), -9.0f), p.state0};
  int64_t t0 = 0;
  for (const auto& [len, chunked] : segs) {
    const DeltaRuleArgs a = p.args(t0, len, r.state.data(), r.o.data());
    if (chunked) {
      std::vector<float> scratch(
          static_cast<size_t>(delta_rule_chunked_scratch_floats(len, p.s.nv, p.s.dk, p.s.dv)));
      kern.delta_rule_chunked(a, scratch.data());
    } else {
      kern.delta_rule_recurrent(a);
    }
    t0 += len;
  }
  return r;
}

// Worst ratio of error to bound seen, reported at the end.
double g_worst_rec = 0, g_worst_chunk = 0;
// Largest |chunked - recurrent| in FP32 (scalar tables), outputs and states.
double g_diff_out = 0, g_diff_state = 0;

void expect_within(const Problem& p, const Exact& e, const Bounds& b, const Result& r,
                   const std::string& where, double* worst) {
  const Shape& s = p.s;
  for (int64_t t = 0; t < s.t; ++t) {
    for (int64_t h = 0; h < s.nv; ++h) {
      double d = 0;
      for (int64_t j = 0; j < s.dv; ++j) {
        const double x = r.o[t * p.ldo + h * s.dv + j] - e.o[(t * s.nv + h) * s.dv + j];
        d += x * x;
      }
      d = std::sqrt(d);
      ASSERT_LE(d, b.out[t * s.nv + h]) << where << " output t=" << t << " h=" << h;
      *worst = std::max(*worst, d / b.out[t * s.nv + h]);
    }
  }
  for (int64_t h = 0; h < s.nv; ++h) {
    double d = 0;
    for (int64_t i = 0; i < s.dk * s.dv; ++i) {
      const double x = r.state[h * s.dk * s.dv + i] - e.state[h * s.dk * s.dv + i];
      d += x * x;
    }
    d = std::sqrt(d);
    ASSERT_LE(d, b.state[h] + 1e-30) << where << " state h=" << h;
    *worst = std::max(*worst, d / (b.state[h] + 1e-30));
  }
}

std::vector<Shape> shapes(std::initializer_list<int64_t> ts) {
  std::vector<Shape> v;
  for (int64_t t : ts) {
    for (int64_t nk : {1, 2}) {
      for (int64_t nv : {2, 4}) {
        for (int64_t dk : {16, 24, 64}) {
          for (int64_t dv : {16, 24, 64}) v.push_back({t, nk, nv, dk, dv});
        }
      }
    }
  }
  return v;
}

TEST(DeltaNet, RecurrentEveryVariantMatchesDoubleRecurrence) {
  for (const Shape& s : shapes({1, 7, 64, 65, 150})) {
    const Problem p(s, false);
    const Exact e = exact_recurrence(p);
    const std::vector<std::pair<int64_t, bool>> whole = {{s.t, false}};
    const Bounds b = bounds(p, e, whole);
    const Result ref = run(scalar(), p, whole);
    for (const DeltaNetKernels* kern : variants()) {
      const std::string where = std::string(isa_name(kern->isa)) + " " + describe(s);
      const Result r = kern->isa == IsaLevel::kScalar ? ref : run(*kern, p, whole);
      expect_within(p, e, b, r, where, &g_worst_rec);
      ASSERT_EQ(r.o, ref.o) << where << " (scalar table, bit for bit)";
      ASSERT_EQ(r.state, ref.state) << where;
      // One call per token: the same operations, so the same bits.
      const Result steps = run(*kern, p, std::vector<std::pair<int64_t, bool>>(s.t, {1, false}));
      ASSERT_EQ(steps.o, r.o) << where << " token by token";
      ASSERT_EQ(steps.state, r.state) << where;
    }
  }
}

void check_chunked(bool zero) {
  for (const Shape& s : shapes({1, 7, 63, 64, 65, 150})) {
    const Problem p(s, zero);
    const Exact e = exact_recurrence(p);
    const std::vector<std::pair<int64_t, bool>> chunked = {{s.t, true}}, rec = {{s.t, false}};
    const Bounds bc = bounds(p, e, chunked), br = bounds(p, e, rec);
    const Result ref = run(scalar(), p, chunked);
    const Result rr = run(scalar(), p, rec);
    for (const DeltaNetKernels* kern : variants()) {
      const std::string where = std::string(isa_name(kern->isa)) + " " + describe(s) +
                                (zero ? " zero state" : " random state");
      const Result r = kern->isa == IsaLevel::kScalar ? ref : run(*kern, p, chunked);
      expect_within(p, e, bc, r, where, &g_worst_chunk);
      ASSERT_EQ(r.o, ref.o) << where << " (scalar table, bit for bit)";
      ASSERT_EQ(r.state, ref.state) << where;
    }
    // Chunked against the FP32 recurrence: within the sum of the two bounds.
    for (int64_t t = 0; t < s.t; ++t) {
      for (int64_t h = 0; h < s.nv; ++h) {
        const float* a = &ref.o[t * p.ldo + h * s.dv];
        const float* c = &rr.o[t * p.ldo + h * s.dv];
        double d = 0;
        for (int64_t j = 0; j < s.dv; ++j) {
          const double x = static_cast<double>(a[j]) - c[j];
          d += x * x;
          g_diff_out = std::max(g_diff_out, std::fabs(x));
        }
        ASSERT_LE(std::sqrt(d), bc.out[t * s.nv + h] + br.out[t * s.nv + h]) << describe(s);
      }
    }
    for (int64_t h = 0; h < s.nv; ++h) {
      double d = 0;
      for (int64_t i = h * s.dk * s.dv; i < (h + 1) * s.dk * s.dv; ++i) {
        const double x = static_cast<double>(ref.state[i]) - rr.state[i];
        d += x * x;
        g_diff_state = std::max(g_diff_state, std::fabs(x));
      }
      ASSERT_LE(std::sqrt(d), bc.state[h] + br.state[h] + 1e-30) << describe(s);
    }
  }
}

TEST(DeltaNet, ChunkedEqualsRecurrenceWithinBoundFromZeroState) { check_chunked(true); }
TEST(DeltaNet, ChunkedEqualsRecurrenceWithinBoundFromRandomState) { check_chunked(false); }

TEST(DeltaNet, ChunkedPrefillInPiecesThenRecurrentDecode) {
  // 7 + 64 + 59 tokens of chunked prefill, then 20 decode steps; and 1 + 63 + 66 + 20.
  const std::vector<std::vector<std::pair<int64_t, bool>>> plans = {
      {{7, true}, {64, true}, {59, true}}, {{1, true}, {63, true}, {66, true}}};
  for (const Shape& s : shapes({150})) {
    const Problem p(s, false);
    const Exact e = exact_recurrence(p);
    for (auto plan : plans) {
      for (int i = 0; i < 20; ++i) plan.push_back({1, false});
      const Bounds b = bounds(p, e, plan);
      for (const DeltaNetKernels* kern : variants()) {
        const std::string where = std::string(isa_name(kern->isa)) + " " + describe(s) +
                                  " first piece " + std::to_string(plan[0].first);
        expect_within(p, e, b, run(*kern, p, plan), where, &g_worst_chunk);
      }
    }
  }
}

// The bounds above hold; this says they are not so loose that they could hold anything: on
// these shapes the scalar table's worst error uses 1.07% (recurrent) and 0.38% (chunked) of
// its bound, so an error a few hundred times the rounding's would fail them. The floors are a
// tenth of those figures (the scalar table is the same on every machine).
TEST(DeltaNet, BoundsAreWithinAFewHundredTimesTheErrors) {
  double rec = 0, chunk = 0;
  for (const Shape& s : shapes({7, 65, 150})) {
    const Problem p(s, false);
    const Exact e = exact_recurrence(p);
    const std::vector<std::pair<int64_t, bool>> whole = {{s.t, false}}, chunked = {{s.t, true}};
    expect_within(p, e, bounds(p, e, whole), run(scalar(), p, whole), describe(s), &rec);
    expect_within(p, e, bounds(p, e, chunked), run(scalar(), p, chunked), describe(s), &chunk);
  }
  std::printf("worst error / bound: recurrent %.3g, chunked %.3g\n", rec, chunk);
  EXPECT_GE(rec, 1.07e-3);
  EXPECT_GE(chunk, 3.8e-4);
  std::printf(
      "max |chunked - recurrent| (the tests above, this process): outputs %.3g, states "
      "%.3g\n",
      g_diff_out, g_diff_state);
}

// ---------------------------------------------------------------- row ops

TEST(DeltaNet, L2NormEveryVariantMatchesDouble) {
  for (const DeltaNetKernels* kern : variants()) {
    for (int64_t dim : {5, 16, 24, 64, 128}) {
      for (float scale : {1.0f, 1.0f / std::sqrt(static_cast<float>(dim))}) {
        std::mt19937 rng(kSeed + static_cast<uint32_t>(dim));
        const int64_t t = 7, heads = 3, ld = heads * dim + 3;
        const auto x0 = normal(static_cast<size_t>(t * ld), 2.0f, rng);
        auto x = x0;
        kern->l2_norm(x.data(), t, heads, dim, ld, scale);
        const std::string where = std::string(isa_name(kern->isa)) + " dim=" + std::to_string(dim) +
                                  " seed=" + std::to_string(kSeed);
        for (int64_t r = 0; r < t; ++r) {
          for (int64_t hd = 0; hd < heads; ++hd) {
            const float* p0 = &x0[r * ld + hd * dim];
            double ss = 0;
            for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(p0[i]) * p0[i];
            const double f = scale / std::sqrt(ss + static_cast<double>(kL2NormEps));
            for (int64_t i = 0; i < dim; ++i) {
              const double ref = p0[i] * f;
              ASSERT_LE(std::fabs(x[r * ld + hd * dim + i] - ref),
                        (dim + 8) * kU * std::fabs(ref) + 1e-30)
                  << where << " r=" << r << " i=" << i;
            }
          }
          for (int64_t i = heads * dim; i < ld; ++i) ASSERT_EQ(x[r * ld + i], x0[r * ld + i]);
        }
      }
    }
  }
}

TEST(DeltaNet, GatedRmsNormEveryVariantMatchesDouble) {
  for (const DeltaNetKernels* kern : variants()) {
    for (int64_t dim : {5, 16, 24, 64, 128}) {
      std::mt19937 rng(kSeed + 100 + static_cast<uint32_t>(dim));
      const int64_t rows = 5;
      const auto x = normal(static_cast<size_t>(rows * dim), 0.7f, rng);
      const auto z = normal(static_cast<size_t>(rows * dim), 2.0f, rng);
      auto w = normal(static_cast<size_t>(dim), 0.1f, rng);
      for (float& v : w) v += 1.0f;
      const float eps = 1e-6f;
      std::vector<float> y(x.size()), xi = x;
      kern->gated_rms_norm(x.data(), z.data(), w.data(), rows, dim, eps, y.data());
      kern->gated_rms_norm(xi.data(), z.data(), w.data(), rows, dim, eps, xi.data());
      const std::string where = std::string(isa_name(kern->isa)) + " dim=" + std::to_string(dim);
      ASSERT_EQ(xi, y) << where << " in place";
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i)
          ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
        for (int64_t i = 0; i < dim; ++i) {
          const double ref = w[i] * (x[r * dim + i] * inv) * silu_d(z[r * dim + i]);
          ASSERT_LE(std::fabs(y[r * dim + i] - ref), (dim + 12) * kU * std::fabs(ref) + 1e-30)
              << where << " r=" << r << " i=" << i;
        }
      }
    }
  }
}

TEST(DeltaNet, GatesEveryVariantMatchDoubleAndScalarBitForBit) {
  std::mt19937 rng(kSeed + 7);
  auto x = uniform(997, -30.0f, 30.0f, rng);
  for (float v : {0.0f, -0.0f, 20.0f, 20.5f, 19.99f, -88.0f, -100.0f, 88.0f, 100.0f})
    x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  const int64_t t = 5, nv = 4, lda = 6;
  const auto a = normal(static_cast<size_t>(t * lda), 2.0f, rng);
  const std::vector<float> dt_bias = {1.0f, 0.5f, -0.25f, 2.0f};
  std::vector<float> a_log;
  for (float v : uniform(4, 0.01f, 16.0f, rng)) a_log.push_back(std::log(v));
  std::vector<float> sig_ref(x.size()), sp_ref(x.size()), g_ref(static_cast<size_t>(t * nv));
  scalar().sigmoid(x.data(), n, sig_ref.data());
  scalar().softplus(x.data(), n, sp_ref.data());
  scalar().decay_gate(a.data(), lda, dt_bias.data(), a_log.data(), t, nv, g_ref.data());
  for (const DeltaNetKernels* kern : variants()) {
    const std::string where = std::string(isa_name(kern->isa)) + " seed=" + std::to_string(kSeed);
    std::vector<float> sig(x.size()), sp(x.size()), g(g_ref.size());
    kern->sigmoid(x.data(), n, sig.data());
    kern->softplus(x.data(), n, sp.data());
    kern->decay_gate(a.data(), lda, dt_bias.data(), a_log.data(), t, nv, g.data());
    ASSERT_EQ(sig, sig_ref) << where;
    ASSERT_EQ(sp, sp_ref) << where;
    ASSERT_EQ(g, g_ref) << where;
    for (int64_t i = 0; i < n; ++i) {
      const double xd = x[i];
      const double s = 1.0 / (1.0 + std::exp(-xd));
      ASSERT_LE(std::fabs(sig[i] - s), 5 * kU * s + 1e-40) << where << " sigmoid(" << x[i] << ")";
      const double p = std::log1p(std::exp(xd));
      const double tol = 6 * kU * p + (xd > 20 ? std::exp(-xd) : 0.0) + 1e-40;
      ASSERT_LE(std::fabs(sp[i] - p), tol) << where << " softplus(" << x[i] << ")";
    }
    for (int64_t r = 0; r < t; ++r) {
      for (int64_t h = 0; h < nv; ++h) {
        // The FP32 sum a + dt_bias errs by u |a + dt_bias|; softplus' is sigmoid.
        const double arg = static_cast<double>(a[r * lda + h]) + dt_bias[h];
        const double big_a = std::exp(static_cast<double>(a_log[h]));
        const double ref = -big_a * std::log1p(std::exp(arg));
        const double tol =
            big_a * kU * std::fabs(arg) / (1.0 + std::exp(-arg)) + 10 * kU * std::fabs(ref) + 1e-38;
        ASSERT_LE(std::fabs(g[r * nv + h] - ref), tol) << where << " gate r=" << r << " h=" << h;
      }
    }
  }
}

}  // namespace
}  // namespace mx
