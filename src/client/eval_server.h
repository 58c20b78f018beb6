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
#include "eval/task.h"

namespace mx {

struct EvalServerOptions {
  Endpoint endpoint;
  std::string model;  // empty: the first model the server lists
  std::string task_file;
  TaskOptions task;  // shots, format, examples file, question limit: as in load_task
  int parallel = 8;
  int64_t max_new_tokens = 0;  // <= 0: task_max_new_tokens' default for each row's format
  std::string dump_file;       // non-empty: write_task_dump there
};

struct EvalServerResult {
  TaskResult score;  // latency: seconds for the whole set, requests in parallel
  std::string task;  // task_name of the file
  int parallel = 0;
  nlohmann::json to_json() const;  // task_report_json
};

// Fails when the task cannot be read or any request fails (naming the first failure).
Result<EvalServerResult> eval_server(const EvalServerOptions& opt);

}  // namespace mx
