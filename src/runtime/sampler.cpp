#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "runtime/sampler_exp.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace mx {

namespace {

struct ParamRange {
  std::string_view param;
  double lo, hi;
  bool lo_open;  // (lo, hi] rather than [lo, hi]
  bool integer;
  const char* text;  // the range as the message states it
};

// vLLM's bounds; the penalties' upper bound only keeps them finite in a float.
constexpr ParamRange kParamRanges[] = {
    {"temperature", 0, 2, false, false, "in [0, 2]"},
    {"top_p", 0, 1, true, false, "in (0, 1]"},
    {"top_k", -1, INT_MAX, false, true, "an integer: 0 or -1 (off), or at least 1"},
    {"min_p", 0, 1, false, false, "in [0, 1]"},
    {"presence_penalty", -2, 2, false, false, "in [-2, 2]"},
    {"frequency_penalty", -2, 2, false, false, "in [-2, 2]"},
    {"repetition_penalty", 0, FLT_MAX, true, false, "a finite number greater than 0"},
};

}  // namespace

std::string sampling_param_error(std::string_view param, double value) {
  for (const ParamRange& r : kParamRanges) {
    if (r.param != param) continue;
    const bool ok = std::isfinite(value) && (r.lo_open ? value > r.lo : value >= r.lo) &&
                    value <= r.hi && (!r.integer || value == std::floor(value));
    if (ok) return "";
    char got[32];
    std::snprintf(got, sizeof(got), "%.9g", value);
    return std::string(param) + " must be " + r.text + ", got " + got;
  }
  return std::string("unknown sampling parameter '") + std::string(param) + "'";
}

void apply_logit_processors(float* logits, int64_t vocab, const SamplingParams& p,
                            int64_t generated) {
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && id < vocab) logits[id] += bias;
  }
  if (generated >= p.min_tokens) return;
  for (const std::vector<int32_t>* ids : {&p.stop_token_ids, &p.forced_stop_token_ids}) {
    for (int32_t id : *ids) {
      if (id >= 0 && id < vocab) logits[id] = -INFINITY;
    }
  }
}

void apply_penalties(float* logits, int64_t vocab, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& output, const SamplingParams& p) {
  if (p.repetition_penalty != 1.0f) {
    std::unordered_set<int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    for (int32_t id : seen) {
      if (id < 0 || id >= vocab) continue;
      float& l = logits[id];
      l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (int32_t id : output) ++counts[id];
    for (const auto& [id, n] : counts) {
      if (id < 0 || id >= vocab) continue;
      logits[id] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
    }
  }
}

namespace {

using Prob = std::pair<int32_t, double>;

// The order filtered_distribution reports: higher probability first, ties to the lower id.
bool before(const Prob& a, const Prob& b) {
  return a.second > b.second || (a.second == b.second && a.first < b.first);
}

// d's first n in that order moved to its front, sorted where `sorted`; the rest stays in no
// order. A full sort of a 151,936-token vocabulary took 15-20 ms a sampled token (as long as a
// decode step of the 30B-A3B shape); the filters rarely need more than a short front, and a
// draw needs no order.
void select_front(std::vector<Prob>& d, size_t n, bool sorted) {
  const auto mid = d.begin() + static_cast<std::ptrdiff_t>(n);
  if (n >= d.size()) {
    if (sorted) std::sort(d.begin(), d.end(), before);
  } else if (sorted && n <= 4096) {
    std::partial_sort(d.begin(), mid, d.end(), before);
  } else {
    std::nth_element(d.begin(), mid, d.end(), before);
    if (sorted) std::sort(d.begin(), mid, before);
  }
}

// Top-p's cut within d's first `bound` (already the order's first, in no order beyond
// `sorted` sorted ones whose sum is `cum`): halves of the rest, the upper one found by
// nth_element and its mass added while the cut lies past it, then the last short range
// sorted and added one by one. Linear in the vocabulary where a flat distribution (a high
// temperature, a random model) keeps most of it.
size_t top_p_cut(std::vector<Prob>& d, size_t sorted, size_t bound, double cum, double top_p) {
  size_t lo = sorted, hi = bound;
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(d.begin() + static_cast<std::ptrdiff_t>(lo),
                     d.begin() + static_cast<std::ptrdiff_t>(mid),
                     d.begin() + static_cast<std::ptrdiff_t>(hi), before);
    double mass = 0;
    for (size_t i = lo; i < mid; ++i) mass += d[i].second;
    if (cum + mass >= top_p) {
      hi = mid;
    } else {
      cum += mass;
      lo = mid;
    }
  }
  std::sort(d.begin() + static_cast<std::ptrdiff_t>(lo),
            d.begin() + static_cast<std::ptrdiff_t>(hi), before);
  for (size_t i = lo; i < hi; ++i) {
    cum += d[i].second;
    if (cum >= top_p) return i + 1;
  }
  // The halving found the cut within hi (the one-by-one sum can fall short of the block's by
  // a rounding): keep that far.
  return hi;
}

// How many of the order's first elements top-k, top-p and min-p keep (each a cut of that
// order), moved to d's front, sorted where `sorted`.
size_t kept_front(std::vector<Prob>& d, const SamplingParams& p, bool sorted) {
  size_t bound = d.size();
  if (p.top_k > 0) bound = std::min(bound, static_cast<size_t>(p.top_k));
  if (p.min_p > 0.0f) {
    double top = 0;
    for (const Prob& e : d) top = std::max(top, e.second);
    const double floor = p.min_p * top;
    size_t at_least = 0;
    for (const Prob& e : d) at_least += e.second >= floor;
    bound = std::min(bound, std::max<size_t>(at_least, 1));
  }
  if (p.top_p >= 1.0f) {
    select_front(d, bound, sorted);
    return bound;
  }
  // Most distributions reach top_p within a few dozen tokens: those sorted first.
  const size_t n = std::min<size_t>(bound, 64);
  select_front(d, n, true);
  double cum = 0;
  for (size_t i = 0; i < n; ++i) {
    cum += d[i].second;
    if (cum >= p.top_p) return i + 1;
  }
  if (n == bound) return bound;
  if (bound < d.size()) {
    std::nth_element(d.begin() + static_cast<std::ptrdiff_t>(n),
                     d.begin() + static_cast<std::ptrdiff_t>(bound), d.end(), before);
  }
  const size_t cut = top_p_cut(d, n, bound, cum, p.top_p);
  if (sorted) std::sort(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(cut), before);
  return cut;
}

// The largest logit, in eight running maxima (NaNs passed over, as a comparison does).
double max_logit(const float* logits, int64_t vocab) {
  float lanes[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                    -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  const int64_t v8 = vocab / 8 * 8;
  for (int64_t i = 0; i < v8; i += 8) {
    for (int j = 0; j < 8; ++j) lanes[j] = logits[i + j] > lanes[j] ? logits[i + j] : lanes[j];
  }
  for (int64_t i = v8; i < vocab; ++i) lanes[0] = logits[i] > lanes[0] ? logits[i] : lanes[0];
  double mx = -INFINITY;
  for (float v : lanes) mx = std::max(mx, static_cast<double>(v));
  return mx;
}

// The sum of exp((logits[i] - mx) * inv_t) on the vector exp (0.7 ms a token over 151,936
// logits with the C library's), in four interleaved sums; each term into num[i] where num is
// given, else through a short buffer (log-probs need only the sum).
double sum_of_exps(const float* logits, int64_t vocab, double mx, double inv_t, double* num) {
  constexpr int64_t kBlock = 1024;
  double buf[kBlock];
  double sums[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b < vocab; b += kBlock) {
    const int64_t n = std::min(kBlock, vocab - b);
    double* e = num != nullptr ? num + b : buf;
    sampler_exp_kernels().exps(logits + b, n, mx, inv_t, e);
    for (int64_t i = 0; i < n; ++i) sums[(b + i) % 4] += e[i];
  }
  return (sums[0] + sums[1]) + (sums[2] + sums[3]);
}

// The distribution after temperature and the filters. With `ordered` false, the kept tokens
// in id order: a draw walking them follows the same distribution without ordering the
// vocabulary.
std::vector<Prob> distribution(const float* logits, int64_t vocab, const SamplingParams& p,
                               bool ordered) {
  const double mx = max_logit(logits, vocab);
  if (!std::isfinite(mx)) {
    // A logit of +inf, or none above -inf: all of the mass on the first largest (what greedy
    // takes), the same on every ISA.
    return {{static_cast<int32_t>(argmax(logits, vocab)), 1.0}};
  }
  std::vector<double> num(static_cast<size_t>(vocab));
  const double sum =
      sum_of_exps(logits, vocab, mx, 1.0 / static_cast<double>(p.temperature), num.data());
  auto prob = [&](int64_t i) -> Prob {
    return {static_cast<int32_t>(i), num[static_cast<size_t>(i)] / sum};
  };
  std::vector<Prob> d(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) d[static_cast<size_t>(i)] = prob(i);
  const bool filtered = p.top_k > 0 || p.top_p < 1.0f || p.min_p > 0.0f;
  if (!filtered && !ordered) return d;
  d.resize(kept_front(d, p, ordered));
  if (!ordered) {
    // The kept set in id order (the order a selection leaves it in is the library's): every
    // token at or before the cut's last one in the filters' order.
    const Prob last = *std::max_element(d.begin(), d.end(), before);
    d.clear();
    for (int64_t i = 0; i < vocab; ++i) {
      const Prob e = prob(i);
      if (!before(last, e)) d.push_back(e);
    }
  }
  double kept = 0;
  for (const auto& e : d) kept += e.second;
  for (auto& e : d) e.second /= kept;
  return d;
}

}  // namespace

std::vector<std::pair<int32_t, double>> filtered_distribution(const float* logits, int64_t vocab,
                                                              const SamplingParams& p) {
  return distribution(logits, vocab, p, true);
}

int64_t argmax(const float* x, int64_t n) {
  if (std::isnan(x[0])) return 0;
  float best = x[0];
  int64_t i = 0;
#if defined(__SSE2__)
  // Four vectors of lanes (SSE2 is every x86-64's): maxps keeps its second operand when the
  // first is a NaN, as the scalar comparison below does.
  __m128 m[4];
  for (__m128& v : m) v = _mm_set1_ps(x[0]);
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 4; ++j) m[j] = _mm_max_ps(_mm_loadu_ps(x + i + 4 * j), m[j]);
  }
  alignas(16) float lanes[16];
  for (int j = 0; j < 4; ++j) _mm_store_ps(lanes + 4 * j, m[j]);
  for (float v : lanes) best = v > best ? v : best;
#endif
  for (; i < n; ++i) best = x[i] > best ? x[i] : best;
  i = 0;
#if defined(__SSE2__)
  const __m128 b = _mm_set1_ps(best);
  for (; i + 16 <= n; i += 16) {
    int hit = 0;
    for (int j = 0; j < 4; ++j) {
      hit |= _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i + 4 * j), b)) << (4 * j);
    }
    if (hit != 0) return i + std::countr_zero(static_cast<unsigned>(hit));
  }
#endif
  while (x[i] != best) ++i;
  return i;
}

Sampler::Sampler(const SamplingParams& p) : p_(p) {
  rng_.seed(p.seed ? *p.seed : std::random_device{}());
}

int32_t Sampler::sample(float* logits, int64_t vocab, const std::vector<int32_t>& prompt,
                        const std::vector<int32_t>& output) {
  apply_penalties(logits, vocab, prompt, output, p_);
  if (p_.temperature <= 0.0f || p_.top_k == 1) {
    return static_cast<int32_t>(argmax(logits, vocab));
  }
  const auto d = distribution(logits, vocab, p_, false);
  // 53 random bits to a double in [0, 1): the same draw on every platform for one seed.
  const double u = static_cast<double>(rng_() >> 11) * 0x1p-53;
  double cum = 0;
  int32_t last = d.front().first;
  for (const auto& [id, prob] : d) {
    cum += prob;
    if (u < cum) return id;
    if (prob > 0) last = id;
  }
  // u past the sum's rounding: the last token that can be drawn.
  return last;
}

int32_t Sampler::verify(float* logits, int64_t vocab, const std::vector<int32_t>& prompt,
                        const std::vector<int32_t>& output, int32_t draft, bool* accepted) {
  apply_penalties(logits, vocab, prompt, output, p_);
  if (p_.temperature <= 0.0f || p_.top_k == 1) {
    const auto id = static_cast<int32_t>(argmax(logits, vocab));
    *accepted = id == draft;
    return id;
  }
  const auto d = distribution(logits, vocab, p_, false);
  double pd = 0;
  for (const auto& [id, prob] : d) pd = id == draft ? prob : pd;
  const double u = static_cast<double>(rng_() >> 11) * 0x1p-53;
  *accepted = u < pd;
  if (*accepted) return draft;
  // The residual max(0, p - q) with q all on the draft: p without it.
  const double v = static_cast<double>(rng_() >> 11) * 0x1p-53 * (1.0 - pd);
  double cum = 0;
  int32_t last = d.front().first;
  for (const auto& [id, prob] : d) {
    if (id == draft) continue;
    cum += prob;
    if (prob > 0) last = id;
    if (v < cum) return id;
  }
  return last;
}

TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int k) {
  const double mx = max_logit(logits, vocab);
  const double lse = mx + std::log(sum_of_exps(logits, vocab, mx, 1.0, nullptr));
  TokenLogprob r;
  r.token = token;
  r.logprob = static_cast<float>(static_cast<double>(logits[token]) - lse);
  const size_t want = static_cast<size_t>(std::clamp<int64_t>(k, 0, vocab));
  // Insertion into a short sorted list: k is at most 20, the vocabulary is large.
  std::vector<std::pair<int32_t, float>>& top = r.top;
  top.reserve(want + 1);
  for (int64_t i = 0; i < vocab && want > 0; ++i) {
    const float l = logits[i];
    if (top.size() == want && l <= top.back().second) continue;
    auto at =
        std::upper_bound(top.begin(), top.end(), l,
                         [](float v, const std::pair<int32_t, float>& e) { return v > e.second; });
    top.insert(at, {static_cast<int32_t>(i), l});
    if (top.size() > want) top.pop_back();
  }
  for (auto& e : top) e.second = static_cast<float>(static_cast<double>(e.second) - lse);
  return r;
}

}  // namespace mx
