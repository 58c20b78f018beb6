#include "client/eval_server.h"

#include <atomic>
#include <chrono>
#include <thread>

namespace mx {

nlohmann::json EvalServerResult::to_json() const {
  return task_report_json(score, task, "openai", parallel);
}

Result<EvalServerResult> eval_server(const EvalServerOptions& opt) {
  if (opt.parallel < 1) return invalid_argument("--parallel must be at least 1");
  MX_ASSIGN_OR_RETURN(std::vector<TaskItem> items, load_task(opt.task_file, opt.task));
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
        const TaskItem& item = items[i];
        const nlohmann::json body = {
            {"model", model},
            {"prompt", item.prompt},
            {"max_tokens", task_max_new_tokens(item.format, opt.max_new_tokens)},
            {"temperature", 0.0},
            {"stop", task_stop_strings(item.format)}};
        out[i] = stream_completion(opt.endpoint, body);
      }
    });
  }
  for (std::thread& t : pool) t.join();
  EvalServerResult r;
  r.task = task_name(opt.task_file);
  r.parallel = opt.parallel;
  TaskResult& s = r.score;
  s.latency = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < items.size(); ++i) {
    if (!out[i].ok) return io_error("question " + std::to_string(i + 1) + ": " + out[i].error);
    const std::string got = task_prediction(out[i].text, items[i].format);
    ++s.questions;
    if (got == items[i].answer) ++s.correct;
    if (!is_number(got)) ++s.invalid;
    s.output_tokens += out[i].completion_tokens;
    s.outputs.push_back(std::move(out[i].text));
  }
  if (!opt.dump_file.empty()) MX_RETURN_IF_ERROR(write_task_dump(opt.dump_file, items, s));
  return r;
}

}  // namespace mx
