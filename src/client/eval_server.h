// Few-shot task accuracy through a server's completions API, as SGLang's few-shot harness
// measures it: greedy answers requested in parallel, scored with the same prompts, stop
// strings and answer extraction as the local evaluator, so both give the same accuracy for
// the same model and scheme.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "client/openai_client.h"
#include "core/status.h"

namespace mx {

struct EvalServerOptions {
  Endpoint endpoint;
  std::string model;  // empty: the first model the server lists
  std::string task_file;
  int64_t shots = -1;  // as in load_task
  int parallel = 8;
  int64_t max_new_tokens = 8;
  int64_t max_questions = 0;
};

struct EvalServerResult {
  int64_t questions = 0, correct = 0, invalid = 0;
  int64_t output_tokens = 0;
  double latency = 0;  // seconds for the whole set
  double accuracy() const;
  double invalid_rate() const;
  double output_throughput() const;
  nlohmann::json to_json() const;
};

// Fails when the task cannot be read or any request fails (naming the first failure).
Result<EvalServerResult> eval_server(const EvalServerOptions& opt);

}  // namespace mx
