// Commands that talk to a running server instead of loading a model: bench-serving and
// eval-server.
#include <cmath>
#include <cstdio>
#include <limits>

#include "app/commands.h"
#include "client/bench_serving.h"
#include "client/eval_server.h"

namespace mx::app {
namespace {

void add_endpoint_flags(CLI::App* cmd, Endpoint* ep, std::string* model) {
  cmd->add_option("--base-url", ep->base_url, "Server address, e.g. http://127.0.0.1:30000")
      ->required();
  cmd->add_option("--api-key", ep->api_key, "Bearer token");
  cmd->add_option("--model", *model, "Model id (default: the first the server lists)");
}

struct BenchServingArgs {
  BenchServingOptions opt;
  std::string rate = "inf";
  bool json = false;
};

int run_bench_serving(BenchServingArgs& a) {
  if (a.rate == "inf") {
    a.opt.request_rate = std::numeric_limits<double>::infinity();
  } else {
    char* end = nullptr;
    a.opt.request_rate = std::strtod(a.rate.c_str(), &end);
    if (end == a.rate.c_str() || *end != '\0' || !(a.opt.request_rate > 0)) {
      std::fprintf(stderr,
                   "mxserve bench-serving: --request-rate must be a positive number or "
                   "inf, not '%s'\n",
                   a.rate.c_str());
      return 2;
    }
  }
  if (a.opt.multi_turn > 0) {
    auto m = bench_multi_turn(a.opt);
    if (!m.is_ok()) {
      std::fprintf(stderr, "mxserve bench-serving: %s\n", m.status().to_string().c_str());
      return 1;
    }
    std::printf("%s", a.json ? (m->to_json().dump() + "\n").c_str() : m->report().c_str());
    return m->failed == 0 ? 0 : 1;
  }
  auto r = bench_serving(a.opt);
  if (!r.is_ok()) {
    std::fprintf(stderr, "mxserve bench-serving: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (a.json) {
    std::printf("%s\n", r->to_json().dump().c_str());
  } else {
    std::printf("%s", r->report().c_str());
  }
  return r->failed == 0 ? 0 : 1;
}

struct EvalServerArgs {
  EvalServerOptions opt;
  std::string format = "auto";
  bool json = false;
};

int run_eval_server(EvalServerArgs& a) {
  auto format = parse_task_format(a.format);
  if (!format.is_ok()) {
    std::fprintf(stderr, "mxserve eval-server: --task-format: %s\n",
                 format.status().to_string().c_str());
    return 2;
  }
  a.opt.task.format = *format;
  auto r = eval_server(a.opt);
  if (!r.is_ok()) {
    std::fprintf(stderr, "mxserve eval-server: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (a.json) {
    std::printf("%s\n", r->to_json().dump().c_str());
    return 0;
  }
  std::printf("%sQuestions: %lld\n", task_report(r->score).c_str(),
              static_cast<long long>(r->score.questions));
  return 0;
}

}  // namespace

void register_bench_serving(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<BenchServingArgs>();
  auto* cmd = app.add_subcommand("bench-serving",
                                 "Load a running server and report latency and "
                                 "throughput (TTFT, TPOT, ITL, E2E)");
  BenchServingOptions& o = a->opt;
  add_endpoint_flags(cmd, &o.endpoint, &o.model);
  cmd->add_option("--num-prompts", o.num_prompts, "Requests to send")->capture_default_str();
  cmd->add_option("--request-rate", a->rate, "Poisson arrival rate in requests/s, or inf")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o.max_concurrency, "Requests in flight at most (0: all)")
      ->capture_default_str();
  cmd->add_option("--input-len", o.input_len, "Prompt tokens per request")->capture_default_str();
  cmd->add_option("--output-len", o.output_len, "Generated tokens per request")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed for prompts and arrivals")->capture_default_str();
  cmd->add_option("--multi-turn", o.multi_turn,
                  "Multi-turn chats of this many turns: --num-prompts conversations sharing one "
                  "system prompt, reporting TTFT by turn (0: single requests)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  cmd->add_option("--system-len", o.system_len, "Multi-turn: system prompt tokens")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--turn-len", o.turn_len, "Multi-turn: user tokens per turn")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("!--no-warmup", o.warmup, "Skip the warm-up request");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, &exit_code] { exit_code = run_bench_serving(*a); });
}

void register_eval_server(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<EvalServerArgs>();
  auto* cmd = app.add_subcommand("eval-server",
                                 "Few-shot task accuracy through a server's completions API");
  EvalServerOptions& o = a->opt;
  add_endpoint_flags(cmd, &o.endpoint, &o.model);
  cmd->add_option("--task", o.task_file, "JSONL task (as for mxserve eval --task)")->required();
  cmd->add_option("--task-format", a->format,
                  "auto (rows whose answer holds '####' are gsm8k), line or gsm8k")
      ->capture_default_str();
  cmd->add_option("--shots", o.task.shots,
                  "Build prompts with this many worked examples from the file's first rows "
                  "(default: each row's own prompt; gsm8k rows without one: 5)");
  cmd->add_option("--shots-file", o.task.shots_file,
                  "Take the examples from this JSONL instead, and score every task row");
  cmd->add_option("--max-questions", o.task.max_questions,
                  "Stop after this many questions (0: all)");
  cmd->add_option("--parallel", o.parallel, "Requests in flight")->capture_default_str();
  cmd->add_option("--max-new-tokens", o.max_new_tokens,
                  "Answer length limit (default: 8 for one-line answers, 512 for gsm8k)");
  cmd->add_option("--dump", o.dump_file,
                  "Write each question's label, prediction and generated text (JSONL)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, &exit_code] { exit_code = run_eval_server(*a); });
}

}  // namespace mx::app
