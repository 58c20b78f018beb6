#include <cstdio>

#include "app/commands.h"
#include "runtime/bench.h"
#include "runtime/ep_runtime.h"

namespace mx::app {
namespace {

struct BenchArgs {
  ModelArgs m;
  BenchOptions opt;
  bool json = false;
};

int bench(const BenchArgs& a) {
  auto model = load_model_or_report(a.m, "bench");
  if (!model) return 1;
  if (int code = 0; ep_worker_takes_over(*model, &code)) return code;
  BenchOptions opt = a.opt;
  if (Comm* comm = ep_comm()) {
    opt.ep_stats = [&model, comm] { return total_dispatch_stats(*model, *comm); };
  }
  auto r = run_bench(*model, opt);
  if (!r.is_ok()) {
    std::fprintf(stderr, "mxserve bench: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (Comm* comm = ep_comm()) {
    auto ranks = gather_ep_stats(*model, *comm);
    if (!ranks.is_ok()) {
      std::fprintf(stderr, "mxserve bench: %s\n", ranks.status().to_string().c_str());
      return 1;
    }
    r->ep_ranks = std::move(ranks).value();
  }
  if (a.json) {
    auto j = r->to_json();
    j["model"] = a.m.model;
    j["schemes"] = model->scheme_summary();
    j["kv_cache_dtype"] = kv_dtype_name(model->kv_dtype());
    j["lm_head"] = model->lm_head->scheme_name();
    j["threads"] = a.m.threads;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model: %s (%s, lm_head %s, kv cache %s), %d threads\n%s", a.m.model.c_str(),
              model->scheme_summary().c_str(), model->lm_head->scheme_name().c_str(),
              kv_dtype_name(model->kv_dtype()), a.m.threads, r->report().c_str());
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand(
      "bench", "Prefill and decode speed against this machine's bandwidth and arithmetic peaks");
  add_model_flags(cmd, &a->m);
  // Bounded so that -p + -n and the batch's KV cache cannot overflow; the context check that
  // follows names the real limit.
  cmd->add_option("-p,--prompt", a->opt.prompt, "Prompt tokens per sequence")
      ->check(CLI::Range(int64_t{1}, kMaxConfigSize))
      ->capture_default_str();
  cmd->add_option("-n,--gen", a->opt.gen, "Decoded tokens per sequence")
      ->check(CLI::Range(int64_t{1}, kMaxConfigSize))
      ->capture_default_str();
  cmd->add_option("--batch", a->opt.batch, "Sequences decoded together")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16))
      ->capture_default_str();
  cmd->add_option("-r,--reps", a->opt.reps, "Repetitions")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("--profile", a->opt.profile, "Time every kernel of the forward pass");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, &exit_code] { exit_code = bench(*a); });
}

}  // namespace mx::app
