// Online serving benchmark: sends requests at a Poisson rate (or all at once) under a
// concurrency cap and reports latency and throughput the way SGLang's bench_serving does:
// time to first token, time per output token after the first, inter-token latency between
// streamed chunks, end-to-end latency, and request and token throughput over the run.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "client/openai_client.h"

namespace mx {

struct BenchServingOptions {
  Endpoint endpoint;
  std::string model;  // empty: the first model the server lists
  int num_prompts = 64;
  double request_rate = std::numeric_limits<double>::infinity();  // requests/s
  int max_concurrency = 0;                                        // 0: no cap
  int input_len = 256;
  int output_len = 64;
  uint64_t seed = 1;
  bool warmup = true;  // one request before the measured run
  // Multi-turn chats when > 0: num_prompts conversations of this many turns (see
  // bench_multi_turn).
  int multi_turn = 0;
  int system_len = 2000;
  int turn_len = 200;
};

// Mean, median, p99 (and std) of a sample, in seconds; percentiles interpolate linearly.
struct LatencyStats {
  double mean = 0, median = 0, p99 = 0, std = 0;
  static LatencyStats of(std::vector<double> v);
};

struct BenchServingResult {
  int completed = 0, failed = 0;
  double duration = 0;
  int64_t total_input = 0, total_output = 0;
  double request_throughput = 0, input_throughput = 0, output_throughput = 0;
  double concurrency = 0;  // sum of request latencies / duration
  LatencyStats ttft, tpot, itl, e2e;
  std::vector<std::string> errors;  // one per failed request
  nlohmann::json to_json() const;
  std::string report() const;
};

// Prompts are `input_len` random byte-level tokens (ids below 256, valid in any byte-level
// BPE vocabulary), sent as token ids; `ignore_eos` makes every output `output_len` long.
Result<BenchServingResult> bench_serving(const BenchServingOptions& opt);

// Latency by turn of multi-turn chats, what prefix caching is for.
struct MultiTurnResult {
  int completed = 0, failed = 0;  // requests
  double duration = 0;
  std::vector<LatencyStats> ttft;          // by turn index
  std::vector<double> mean_prompt_tokens;  // by turn index, as the server counted them
  std::vector<std::string> errors;
  nlohmann::json to_json() const;
  std::string report() const;
};

// num_prompts conversations, at most max_concurrency at a time, each a system_len-token system
// prompt shared by all of them, then multi_turn turns: a turn appends turn_len user tokens to
// the history and asks for output_len tokens, and the reply joins the history. The client sees
// the reply's text, not its token ids, so the reply enters the history as that many fresh
// byte-level tokens: a cache reuses the history up to the turn's previous prompt, and each
// turn computes the reply and the new message.
Result<MultiTurnResult> bench_multi_turn(const BenchServingOptions& opt);

}  // namespace mx
