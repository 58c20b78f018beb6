// Each sampling filter against a distribution computed by hand, penalties by hand, and
// reproducibility of a seeded draw.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "runtime/generate.h"
#include "runtime/histogram.h"
#include "runtime/sampler.h"
#include "runtime/sampler_exp.h"

namespace mx {
namespace {

// p = {0.5, 0.2, 0.15, 0.1, 0.05} as logits.
std::vector<float> logits5() {
  return {std::log(0.5f), std::log(0.2f), std::log(0.15f), std::log(0.1f), std::log(0.05f)};
}

std::map<int32_t, double> dist(const SamplingParams& p) {
  const auto l = logits5();
  std::map<int32_t, double> m;
  for (const auto& [id, prob] : filtered_distribution(l.data(), 5, p)) m[id] = prob;
  return m;
}

void expect_dist(const std::map<int32_t, double>& got, const std::map<int32_t, double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [id, p] : want) EXPECT_NEAR(got.at(id), p, 1e-6) << "token " << id;
}

// Against std::max_element on every length to 70, ties, infinities, NaNs and signed zeros.
TEST(Sampler, ArgmaxFindsWhatMaxElementFinds) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, 9);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {nan, inf, -inf, 0.0f, -0.0f, 3.0f, -3.0f};
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = 1 + trial % 70;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) {
      const int kind = pick(rng);
      v = kind < 7 ? specials[kind] : static_cast<float>(pick(rng) - 5);
    }
    const int64_t want = std::max_element(x.begin(), x.end()) - x.begin();
    ASSERT_EQ(argmax(x.data(), n), want) << "trial " << trial << " n " << n;
  }
  std::vector<float> big(151936);
  std::uniform_real_distribution<float> u(-20.0f, 20.0f);
  for (float& v : big) v = u(rng);
  big[100000] = big[120000] = 25.0f;
  EXPECT_EQ(argmax(big.data(), static_cast<int64_t>(big.size())), 100000);
}

// The softmax numerators: every table against the C library's exp in double, on odd lengths,
// arguments from 0 down past exp's range (and -inf), three temperatures. Tolerance: 2 ulp, or
// 3.4e-308 absolute (the AVX2 table's 0 below -708).
TEST(Sampler, EveryExpVariantIsWithinTwoUlpOfExp) {
  std::mt19937 rng(5);
  int variants = 0;
  for (IsaLevel isa : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512, IsaLevel::kAmx}) {
    const SamplerExpKernels* k = sampler_exp_kernels_for(isa);
    if (k == nullptr) continue;
    ++variants;
    for (int64_t n : {1, 3, 4, 7, 8, 9, 33, 1001}) {
      for (double t : {0.1, 1.0, 2.0}) {
        std::uniform_real_distribution<float> below(-80.0f, 0.0f);
        std::vector<float> l(static_cast<size_t>(n));
        for (float& v : l) v = 3.0f + below(rng) * (n % 2 == 0 ? 20.0f : 1.0f);
        l[0] = 3.0f;
        if (n > 2) l[1] = -std::numeric_limits<float>::infinity();
        std::vector<double> out(l.size());
        k->exps(l.data(), n, 3.0, 1.0 / t, out.data());
        for (int64_t i = 0; i < n; ++i) {
          const double want = std::exp((static_cast<double>(l[i]) - 3.0) * (1.0 / t));
          ASSERT_NEAR(out[i], want, std::max(std::ldexp(std::fabs(want), -51), 3.4e-308))
              << isa_name(isa) << " n=" << n << " t=" << t << " logit=" << l[i];
        }
      }
    }
  }
  EXPECT_GE(variants, 2);
}

// No finite largest logit: a +inf takes all of the mass (the first of several), and a
// vocabulary masked to -inf everywhere gives its first token, on every ISA alike.
TEST(Sampler, NonFiniteLogitsGiveTheFirstLargest) {
  const float inf = std::numeric_limits<float>::infinity();
  SamplingParams p;
  p.seed = 3;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> a = {1.0f, -inf, inf, 2.0f, inf};
    std::vector<float> b = {-inf, -inf, -inf};
    Sampler s(p);
    EXPECT_EQ(s.sample(a.data(), 5, {}, {}), 2);
    EXPECT_EQ(s.sample(b.data(), 3, {}, {}), 0);
  }
  const auto d = filtered_distribution(std::vector<float>{0.0f, inf}.data(), 2, p);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].first, 1);
}

TEST(Sampler, NoFilterIsTheSoftmax) {
  expect_dist(dist({}), {{0, 0.5}, {1, 0.2}, {2, 0.15}, {3, 0.1}, {4, 0.05}});
}

TEST(Sampler, TopK) {
  SamplingParams p;
  p.top_k = 2;
  expect_dist(dist(p), {{0, 0.5 / 0.7}, {1, 0.2 / 0.7}});
}

TEST(Sampler, TopP) {
  SamplingParams p;
  p.top_p = 0.8f;  // 0.5 + 0.2 = 0.7 < 0.8; adding 0.15 reaches 0.85
  expect_dist(dist(p), {{0, 0.5 / 0.85}, {1, 0.2 / 0.85}, {2, 0.15 / 0.85}});
}

TEST(Sampler, MinP) {
  SamplingParams p;
  p.min_p = 0.25f;  // keep p >= 0.125
  expect_dist(dist(p), {{0, 0.5 / 0.85}, {1, 0.2 / 0.85}, {2, 0.15 / 0.85}});
}

// A vocabulary of 151,936 with flat and peaked logits: the filters' cuts equal those of the
// whole vocabulary sorted here (probability, then id) and summed in that order, whatever
// part of it the filters keep (top-p reaching 0.9 of a flat distribution, or a few tokens).
TEST(Sampler, FiltersOnALargeVocabularyEqualAFullSort) {
  std::mt19937 rng(11);
  const int64_t vocab = 151936;
  for (float spread : {0.5f, 8.0f}) {
    std::normal_distribution<float> nd(0.0f, spread);
    std::vector<float> l(static_cast<size_t>(vocab));
    for (float& v : l) v = nd(rng);
    double mx = -INFINITY, sum = 0;
    for (float v : l) mx = std::max(mx, static_cast<double>(v));
    std::vector<std::pair<int32_t, double>> all(l.size());
    for (int64_t i = 0; i < vocab; ++i) {
      all[static_cast<size_t>(i)] = {static_cast<int32_t>(i), std::exp(l[i] - mx)};
      sum += all[static_cast<size_t>(i)].second;
    }
    for (auto& e : all) e.second /= sum;
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return a.second > b.second || (a.second == b.second && a.first < b.first);
    });
    for (int top_k : {0, 40, 100000}) {
      for (float top_p : {1.0f, 0.9f, 0.5f}) {
        for (float min_p : {0.0f, 0.05f}) {
          SamplingParams p;
          p.top_k = top_k;
          p.top_p = top_p;
          p.min_p = min_p;
          size_t keep = top_k > 0 ? static_cast<size_t>(top_k) : all.size();
          double cum = 0;
          for (size_t i = 0; i < keep; ++i) {
            cum += all[i].second;
            if (cum >= top_p) {
              keep = i + 1;
              break;
            }
          }
          size_t i = 1;
          while (i < keep && all[i].second >= min_p * all[0].second) ++i;
          if (min_p > 0) keep = i;
          const auto d = filtered_distribution(l.data(), vocab, p);
          ASSERT_EQ(d.size(), keep) << spread << " " << top_k << " " << top_p << " " << min_p;
          double kept = 0;
          for (size_t j = 0; j < keep; ++j) kept += all[j].second;
          for (size_t j = 0; j < keep; ++j) {
            ASSERT_EQ(d[j].first, all[j].first) << j;
            ASSERT_NEAR(d[j].second, all[j].second / kept, 1e-12);
          }
        }
      }
    }
  }
}

TEST(Sampler, Temperature) {
  SamplingParams p;
  p.temperature = 2.0f;  // p_i^(1/2) renormalized
  const double s =
      std::sqrt(0.5) + std::sqrt(0.2) + std::sqrt(0.15) + std::sqrt(0.1) + std::sqrt(0.05);
  expect_dist(dist(p), {{0, std::sqrt(0.5) / s},
                        {1, std::sqrt(0.2) / s},
                        {2, std::sqrt(0.15) / s},
                        {3, std::sqrt(0.1) / s},
                        {4, std::sqrt(0.05) / s}});
}

TEST(Sampler, Penalties) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  // Token 0 in the prompt only; token 1 in the output twice; token 2 once.
  apply_penalties(l.data(), 4, {0}, {1, 1, 2}, p);
  EXPECT_FLOAT_EQ(l[0], 1.0f);                      // 2 / 2
  EXPECT_FLOAT_EQ(l[1], -4.0f - 0.5f - 0.25f * 2);  // -2 * 2, then presence and 2x frequency
  EXPECT_FLOAT_EQ(l[2], 0.5f - 0.5f - 0.25f);       // 1 / 2, then presence and frequency
  EXPECT_FLOAT_EQ(l[3], 0.5f);                      // unseen
}

TEST(Sampler, GreedyAndSeededDraws) {
  SamplingParams g;
  g.temperature = 0.0f;
  auto l = logits5();
  EXPECT_EQ(Sampler(g).sample(l.data(), 5, {}, {}), 0);
  SamplingParams p;
  p.seed = 1234;
  std::vector<int32_t> a, b;
  Sampler sa(p), sb(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 20000; ++i) {
    auto la = logits5(), lb = logits5();
    a.push_back(sa.sample(la.data(), 5, {}, {}));
    b.push_back(sb.sample(lb.data(), 5, {}, {}));
    ++counts[a.back()];
  }
  EXPECT_EQ(a, b);
  // The draws follow the distribution (binomial 5-sigma bounds).
  const double want[] = {0.5, 0.2, 0.15, 0.1, 0.05};
  for (int id = 0; id < 5; ++id) {
    const double sd = std::sqrt(20000 * want[id] * (1 - want[id]));
    EXPECT_NEAR(counts[id], 20000 * want[id], 5 * sd) << id;
  }
  SamplingParams q = p;
  q.seed = 99;
  Sampler sc(q);
  std::vector<int32_t> c;
  for (int i = 0; i < 200; ++i) {
    auto l2 = logits5();
    c.push_back(sc.sample(l2.data(), 5, {}, {}));
  }
  EXPECT_NE(c, std::vector<int32_t>(a.begin(), a.begin() + 200));
}

TEST(StopStrings, FindAndHoldBack) {
  const std::vector<std::string> stops = {"\nQuestion", "END"};
  EXPECT_EQ(find_stop("abc\nQuestion: x", 0, stops), 3u);
  EXPECT_EQ(find_stop("xEND", 0, stops), 1u);
  EXPECT_EQ(find_stop("none", 0, stops), std::string::npos);
  EXPECT_EQ(stop_holdback("answer 42\nQue", stops), 4u);
  EXPECT_EQ(stop_holdback("answer EN", stops), 2u);
  EXPECT_EQ(stop_holdback("answer", stops), 0u);
}

TEST(TokenLogprob, RawLogSoftmaxAndTopKWithTiesToTheLowerId) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(2.0));
  const TokenLogprob r = token_logprob(l.data(), 4, 2, 3);
  EXPECT_EQ(r.token, 2);
  EXPECT_NEAR(r.logprob, 2.0 - lse, 1e-6);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].first, 1);
  EXPECT_EQ(r.top[1].first, 3);
  EXPECT_EQ(r.top[2].first, 2);
  EXPECT_NEAR(r.top[0].second, 3.0 - lse, 1e-6);
  EXPECT_NEAR(r.top[2].second, r.logprob, 1e-7);
  EXPECT_TRUE(token_logprob(l.data(), 4, 0, 0).top.empty());
  EXPECT_EQ(token_logprob(l.data(), 4, 0, 10).top.size(), 4u);
}

// vLLM's ranges, inclusive where vLLM's are; NaN and infinity never pass.
TEST(Sampler, ParameterRangesAreVllms) {
  struct Case {
    const char* param;
    double ok[3];
    double bad[3];
  };
  const double nan = std::nan(""), inf = INFINITY;
  for (const Case& c :
       {Case{"temperature", {0, 1, 2}, {-0.1, 2.5, nan}},
        Case{"top_p", {1e-9, 0.5, 1}, {0, 1.5, nan}}, Case{"top_k", {-1, 0, 50}, {-2, 1.5, 1e30}},
        Case{"min_p", {0, 0.5, 1}, {-0.1, 1.1, inf}},
        Case{"presence_penalty", {-2, 0, 2}, {-2.1, 2.1, nan}},
        Case{"frequency_penalty", {-2, 0, 2}, {-2.1, 2.1, -inf}},
        Case{"repetition_penalty", {1e-3, 1, 10}, {0, -1, inf}}}) {
    for (double v : c.ok) EXPECT_EQ(sampling_param_error(c.param, v), "") << c.param << " " << v;
    for (double v : c.bad) {
      const std::string why = sampling_param_error(c.param, v);
      EXPECT_EQ(why.rfind(std::string(c.param) + " must be", 0), 0u) << why;
    }
  }
  EXPECT_EQ(sampling_param_error("top_p", 0), "top_p must be in (0, 1], got 0");
}

TEST(Histogram, CumulativeBucketsSumAndExposition) {
  Histogram h({2.0, 1.0});
  for (double v : {0.5, 1.0, 1.5, 5.0}) h.observe(v);
  EXPECT_EQ(h.cumulative(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(h.count(), 4);
  EXPECT_DOUBLE_EQ(h.sum(), 8.0);
  const std::string text = h.exposition("lat", "Latency.");
  EXPECT_NE(text.find("# TYPE lat histogram\n"), std::string::npos);
  EXPECT_NE(text.find("lat_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("lat_bucket{le=\"+Inf\"} 4\n"), std::string::npos);
  EXPECT_NE(text.find("lat_sum 8\nlat_count 4\n"), std::string::npos);
}

}  // namespace
}  // namespace mx
