// Token sampling: penalties on the logits, temperature, then top-k, top-p and min-p filters
// on the distribution, then a draw from a seeded generator. Temperature 0 is greedy.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mx {

struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;                    // <= 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // HF style, over prompt and output tokens
  float presence_penalty = 0.0f;    // OpenAI style, over output tokens
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;
  int max_tokens = 128;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // the model's end tokens: ignore_eos ignores them
  bool ignore_eos = false;
  // The request's own stop_token_ids: they stop the output even under ignore_eos, as vLLM's.
  std::vector<int32_t> forced_stop_token_ids;
  // End tokens and stop strings have no effect before this many tokens (vLLM's min_tokens).
  int min_tokens = 0;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits before sampling
};

// Why `value` is not allowed for the sampling parameter `param`, or "" when it is. Names are
// the OpenAI API's (temperature, top_p, top_k, min_p, presence_penalty, frequency_penalty,
// repetition_penalty) and the ranges vLLM's SamplingParams._verify_args (temperature also at
// most 2, as OpenAI's API), so the server and the CLI accept what vLLM accepts and nothing
// reaches the sampler that it cannot draw from (NaN, a top_k beyond int).
std::string sampling_param_error(std::string_view param, double value);

// The request's logit processors in place, before the penalties: logit_bias, and while fewer
// than min_tokens tokens are out (`generated`), every stop token masked to -inf.
void apply_logit_processors(float* logits, int64_t vocab, const SamplingParams& p,
                            int64_t generated);

// Penalizes logits in place. `prompt` feeds only the repetition penalty.
void apply_penalties(float* logits, int64_t vocab, const std::vector<int32_t>& prompt,
                     const std::vector<int32_t>& output, const SamplingParams& p);

// The distribution left after temperature and the filters, as (id, probability) sorted by
// probability, highest first, summing to 1. Temperature must be > 0.
std::vector<std::pair<int32_t, double>> filtered_distribution(const float* logits, int64_t vocab,
                                                              const SamplingParams& p);

// The log-probability of `token` and the `k` most likely tokens (highest first, ties to the
// lower id) under the model's own distribution: the raw logits, before penalties, temperature
// and filters, as OpenAI's and vLLM's `logprobs` report them.
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;
};
TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t token, int k);

// The index of the first largest of x[0, n) (n >= 1), as std::max_element finds it: NaNs are
// passed over, and a NaN at x[0] is the answer. Greedy sampling reads a whole vocabulary of
// logits per token: std::max_element took 0.43 ms over 151,936 of them (3% of a W4A8 decode
// step of the 30B-A3B shape), this 17 us.
int64_t argmax(const float* x, int64_t n);

class Sampler {
 public:
  // Without a seed the generator is seeded from std::random_device.
  explicit Sampler(const SamplingParams& p);
  // Picks the next token; `logits` is modified by the penalties.
  int32_t sample(float* logits, int64_t vocab, const std::vector<int32_t>& prompt,
                 const std::vector<int32_t>& output);
  // Verifies a drafted token that the drafter chose outright (a one-point draft
  // distribution): greedy keeps it when it is the model's choice; sampling keeps it with
  // probability p(draft) and otherwise draws from p without it, renormalized, so that the
  // token returned follows p exactly. `*accepted` says whether the draft was kept.
  int32_t verify(float* logits, int64_t vocab, const std::vector<int32_t>& prompt,
                 const std::vector<int32_t>& output, int32_t draft, bool* accepted);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace mx
