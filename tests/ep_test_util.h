// Shared by the expert-parallel tests (threads and MPI ranks): the bundled model's golden
// prompts run as prefill plus greedy decode, and comparisons of the logits.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "core/json_util.h"
#include "model/model.h"
#include "test_util.h"

namespace mx::test {

inline std::string moe_dir() { return shared_dir() + "/fixtures/tiny-qwen3-moe"; }

inline std::vector<std::vector<int32_t>> golden_prompts() {
  auto g = read_json_file(moe_dir() + "/golden/golden.json");
  std::vector<std::vector<int32_t>> out;
  if (!g.is_ok()) return out;
  for (const Json& p : (*g)["prompts"]) out.push_back(p["input_ids"].get<std::vector<int32_t>>());
  return out;
}

struct RunResult {
  std::vector<float> logits;                 // every position of every prompt, rank 0
  std::vector<float> prefill;                // the prompts' positions only
  std::vector<DispatchStats> stats;          // per rank
  std::vector<uint64_t> gmm1_passes;         // per rank, summed over layers
  std::vector<std::vector<int32_t>> greedy;  // per prompt: the tokens greedy decoding chose
  std::vector<std::vector<float>> margins;   // their top-1 minus top-2 logit
  std::string error;
};

inline uint64_t quant_passes(const DecoderModel& m) {
  uint64_t n = 0;
  for (const DecoderLayer& l : m.layers)
    if (l.moe) n += l.moe->experts->gmm1_quantize_passes();
  return n;
}

inline int32_t argmax(const float* l, int64_t n) {
  return static_cast<int32_t>(std::max_element(l, l + n) - l);
}

inline float top_gap(const float* l, int64_t n) {
  std::vector<float> v(l, l + n);
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return v[0] - v[1];
}

// Each prompt as one prefill (all logits), then `decode` greedy single-token steps.
// `comm`: the expert-parallel group (null: one process).
inline void run_prompts(DecoderModel& m, const std::vector<std::vector<int32_t>>& prompts,
                        int decode, RunResult* out, bool keep, Comm* comm = nullptr) {
  const int64_t vocab = m.config().vocab_size;
  for (const auto& p : prompts) {
    KvCache cache(m.config(), static_cast<int64_t>(p.size()) + decode + 1);
    const int64_t n = static_cast<int64_t>(p.size());
    std::vector<float> logits(static_cast<size_t>(n * vocab));
    Status st = m.forward(p.data(), n, cache, true, logits.data());
    if (!st.is_ok()) {
      out->error = st.to_string();
      return;
    }
    if (keep) {
      out->logits.insert(out->logits.end(), logits.begin(), logits.end());
      out->prefill.insert(out->prefill.end(), logits.begin(), logits.end());
    }
    // Only rank 0 holds logits under expert parallelism: its choice goes to every rank.
    auto choose = [&](const float* row) {
      int32_t t = argmax(row, vocab);
      if (comm != nullptr) {
        EXPECT_TRUE(comm->broadcast(&t, sizeof t, 0).is_ok());
      }
      return t;
    };
    int32_t tok = choose(logits.data() + (n - 1) * vocab);
    std::vector<int32_t> greedy = {tok};
    std::vector<float> margins = {top_gap(logits.data() + (n - 1) * vocab, vocab)};
    for (int s = 0; s < decode; ++s) {
      st = m.forward(&tok, 1, cache, false, logits.data());
      if (!st.is_ok()) {
        out->error = st.to_string();
        return;
      }
      if (keep) out->logits.insert(out->logits.end(), logits.begin(), logits.begin() + vocab);
      tok = choose(logits.data());
      greedy.push_back(tok);
      margins.push_back(top_gap(logits.data(), vocab));
    }
    out->greedy.push_back(std::move(greedy));
    out->margins.push_back(std::move(margins));
  }
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

inline LoadOptions scheme_options(const char* flag) {
  LoadOptions o;
  if (*flag) o.quantization = scheme_from_quantization_flag(flag);
  return o;
}

// Over every position: the most any of the reference's top-5 log-probs moved.
inline double max_top5_logprob_diff(const std::vector<float>& got, const std::vector<float>& ref,
                                    int64_t vocab) {
  double worst = 0;
  for (size_t p = 0; p + static_cast<size_t>(vocab) <= ref.size();
       p += static_cast<size_t>(vocab)) {
    auto lse = [&](const float* l) {
      double m = *std::max_element(l, l + vocab), s = 0;
      for (int64_t i = 0; i < vocab; ++i) s += std::exp(l[i] - m);
      return m + std::log(s);
    };
    const float* r = ref.data() + p;
    const float* g = got.data() + p;
    const double lr = lse(r), lg = lse(g);
    std::vector<int64_t> idx(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + 5, idx.end(),
                      [r](int64_t a, int64_t b) { return r[a] > r[b]; });
    for (int i = 0; i < 5; ++i) {
      const int64_t v = idx[static_cast<size_t>(i)];
      worst = std::max(worst, std::fabs((g[v] - lg) - (r[v] - lr)));
    }
  }
  return worst;
}

// Leading greedy steps whose top-1/top-2 logit gap is at least the fixture README's 0.05:
// the steps a rounding elsewhere must not flip.
inline int64_t safe_len(const std::vector<float>& margins) {
  int64_t n = 0;
  while (n < static_cast<int64_t>(margins.size()) && margins[static_cast<size_t>(n)] >= 0.05f) ++n;
  return n;
}

}  // namespace mx::test
