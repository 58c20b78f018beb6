#include "client/eval_server.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/evaluate.h"

namespace mx {

double EvalServerResult::accuracy() const {
  return questions ? static_cast<double>(correct) / static_cast<double>(questions) : 0;
}
double EvalServerResult::invalid_rate() const {
  return questions ? static_cast<double>(invalid) / static_cast<double>(questions) : 0;
}
double EvalServerResult::output_throughput() const {
  return latency > 0 ? static_cast<double>(output_tokens) / latency : 0;
}

nlohmann::json EvalServerResult::to_json() const {
  return {{"questions", questions},         {"accuracy", accuracy()},
          {"invalid_rate", invalid_rate()}, {"latency_s", latency},
          {"output_tokens", output_tokens}, {"output_throughput", output_throughput()}};
}

Result<EvalServerResult> eval_server(const EvalServerOptions& opt) {
  if (opt.parallel < 1) return invalid_argument("--parallel must be at least 1");
  MX_ASSIGN_OR_RETURN(std::vector<TaskItem> items,
                      load_task(opt.task_file, opt.shots, opt.max_questions));
  std::string model = opt.model;
  if (model.empty()) {
    MX_ASSIGN_OR_RETURN(model, first_model_id(opt.endpoint));
  }
  std::vector<StreamedCompletion> out(items.size());
  std::atomic<size_t> next{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (size_t w = 0; w < std::min(items.size(), static_cast<size_t>(opt.parallel)); ++w) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < items.size();) {
        const nlohmann::json body = {{"model", model},
                                     {"prompt", items[i].prompt},
                                     {"max_tokens", opt.max_new_tokens},
                                     {"temperature", 0.0},
                                     {"stop", task_stop_strings()}};
        out[i] = stream_completion(opt.endpoint, body);
      }
    });
  }
  for (std::thread& t : pool) t.join();
  EvalServerResult r;
  r.latency = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < items.size(); ++i) {
    if (!out[i].ok) return io_error("question " + std::to_string(i + 1) + ": " + out[i].error);
    const std::string got = task_prediction(out[i].text);
    ++r.questions;
    if (got == items[i].answer) ++r.correct;
    if (!is_number(got)) ++r.invalid;
    r.output_tokens += out[i].completion_tokens;
  }
  return r;
}

}  // namespace mx
