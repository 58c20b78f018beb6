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

struct BenchArgs {
  BenchServingOptions opt;
  std::string rate = "inf";
  bool json = false;
};

int bench(BenchArgs& a) {
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

struct EvalArgs {
  EvalServerOptions opt;
  bool json = false;
};

int eval(EvalArgs& a) {
  auto r = eval_server(a.opt);
  if (!r.is_ok()) {
    std::fprintf(stderr, "mxserve eval-server: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (a.json) {
    std::printf("%s\n", r->to_json().dump().c_str());
    return 0;
  }
  std::printf(
      "Accuracy: %.3f\nInvalid: %.3f\nLatency: %.3f s\nOutput throughput: %.3f token/s\n"
      "Questions: %lld\n",
      r->accuracy(), r->invalid_rate(), r->latency, r->output_throughput(),
      static_cast<long long>(r->questions));
  return 0;
}

}  // namespace

void register_bench_serving(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<BenchArgs>();
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
  cmd->add_flag("!--no-warmup", o.warmup, "Skip the warm-up request");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, &exit_code] { exit_code = bench(*a); });
}

void register_eval_server(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval-server",
                                 "Few-shot task accuracy through a server's completions API");
  EvalServerOptions& o = a->opt;
  add_endpoint_flags(cmd, &o.endpoint, &o.model);
  cmd->add_option("--task", o.task_file, "JSONL task (as for mxserve eval --task)")->required();
  cmd->add_option("--shots", o.shots,
                  "Build prompts with this many worked examples from the file's first rows "
                  "(default: each row's own prompt)");
  cmd->add_option("--parallel", o.parallel, "Requests in flight")->capture_default_str();
  cmd->add_option("--max-new-tokens", o.max_new_tokens, "Answer length limit")
      ->capture_default_str();
  cmd->add_option("--max-questions", o.max_questions, "Stop after this many questions (0: all)");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, &exit_code] { exit_code = eval(*a); });
}

}  // namespace mx::app
