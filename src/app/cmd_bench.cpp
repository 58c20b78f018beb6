#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "app/commands.h"
#include "loader/model_text.h"
#include "media/image.h"
#include "media/vision_preprocess.h"
#include "runtime/bench.h"
#include "runtime/ep_runtime.h"
#include "runtime/spec_bench.h"

namespace mx::app {
namespace {

// A passage to repeat with an edit: what prompt lookup serves best, and what users ask of
// coding agents all day.
constexpr const char* kRepeatEdit =
    "Repeat the passage below word for word, but write \"cat\" for \"fox\".\n\n"
    "The quick brown fox jumps over the lazy dog. The fox runs into the forest, where the old "
    "oak tree stands by the river. Every morning the fox drinks from the river and watches the "
    "birds in the oak tree. In the evening the fox goes home to its den under the hill.\n\n";

struct BenchArgs {
  ModelArgs m;
  BenchOptions opt;
  bool json = false;
  bool spec_cost = false;
  int spec_reps = 9;
  SpeculativeOptions spec;
  std::string text = kRepeatEdit;
  std::string image;  // --image WxH
};

// --image WxH: the vision tower's time on a synthetic image of that size (the median of -r
// runs after one warm-up), per image and per patch, beside the text figures.
struct VisionTiming {
  int64_t patches = 0, tokens = 0;
  ImageGrid grid;
  double seconds = 0;
};
Result<VisionTiming> bench_vision(const BenchArgs& a, DecoderModel& model) {
  int w = 0, h = 0;
  char tail = 0;
  if (std::sscanf(a.image.c_str(), "%dx%d%c", &w, &h, &tail) != 2 || w < 1 || h < 1 || w > 16384 ||
      h > 16384) {
    return invalid_argument("--image '" + a.image + "' is not WIDTHxHEIGHT (1 to 16384 each)");
  }
  bool failed = false;
  auto tower = vision_tower_or_report(a.m, model, "bench", &failed);
  if (failed) return invalid_argument("the vision tower does not load");
  if (!tower) return invalid_argument(a.m.model + ": no vision tower to time (--image)");
  MX_ASSIGN_OR_RETURN(VisionPreprocessConfig pre, read_preprocessor_config(a.m.model));
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>(i * 37 % 251);
  MX_ASSIGN_OR_RETURN(PixelPatches px, preprocess_image(img, pre));
  VisionTiming t;
  t.grid = {px.grid_t, px.grid_h, px.grid_w};
  t.patches = px.rows;
  t.tokens = tower->output_rows(t.grid);
  std::vector<float> out(static_cast<size_t>(t.tokens * tower->config().out_hidden_size));
  std::vector<double> runs;
  for (int64_t r = 0; r <= std::max<int64_t>(a.opt.reps, 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    MX_RETURN_IF_ERROR(tower->forward(px.values.data(), t.grid, out.data()));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) runs.push_back(s);
  }
  std::nth_element(runs.begin(), runs.begin() + runs.size() / 2, runs.end());
  t.seconds = runs[runs.size() / 2];
  return t;
}

// --speculative-cost: the verify cost curve for K = 1..8 at a context of -p positions.
int bench_spec_cost(const BenchArgs& a, DecoderModel& model) {
  SpecCostOptions o;
  o.context = a.opt.prompt;
  o.max_k = std::max(8, a.spec.num_draft_tokens);
  o.reps = a.spec_reps;
  o.seed = a.opt.seed;
  o.profile = a.opt.profile;
  auto r = run_spec_cost(model, o);
  if (!r.is_ok()) {
    std::fprintf(stderr, "mxserve bench: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (a.json) {
    auto j = r->to_json();
    j["model"] = a.m.model;
    j["schemes"] = model.scheme_summary();
    j["threads"] = a.m.threads;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model: %s (%s), %d threads\n%s", a.m.model.c_str(), model.scheme_summary().c_str(),
                a.m.threads, r->report().c_str());
  }
  return 0;
}

// --speculative-algorithm: --text decoded greedily for -n tokens with and without drafting.
int bench_spec_gain(const BenchArgs& a, DecoderModel& model) {
  auto tok = load_model_tokenizer(a.m.model);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "mxserve bench: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  SpecGainOptions o;
  o.prompt = (*tok)->encode(a.text);
  o.max_tokens = static_cast<int>(a.opt.gen);
  o.reps = static_cast<int>(a.opt.reps);
  o.spec = a.spec;
  auto drafter = drafter_or_report(a.m, model, a.spec, "bench");
  if (!drafter) return 1;
  o.drafter = drafter->drafter.get();
  auto r = run_spec_gain(model, **tok, o);
  if (!r.is_ok()) {
    std::fprintf(stderr, "mxserve bench: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (a.json) {
    auto j = r->to_json();
    j["model"] = a.m.model;
    j["schemes"] = model.scheme_summary();
    j["threads"] = a.m.threads;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model: %s (%s), %d threads\n%s", a.m.model.c_str(), model.scheme_summary().c_str(),
                a.m.threads, r->report().c_str());
  }
  return r->identical ? 0 : 1;
}

int bench(const BenchArgs& a) {
  auto model = load_model_or_report(a.m, "bench");
  if (!model) return 1;
  if (int code = 0; ep_worker_takes_over(*model, &code)) return code;
  if (a.spec_cost) return bench_spec_cost(a, *model);
  if (a.spec.algorithm != SpecAlgorithm::kNone) return bench_spec_gain(a, *model);
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
  std::optional<VisionTiming> vision;
  if (!a.image.empty()) {
    auto v = bench_vision(a, *model);
    if (!v.is_ok()) {
      std::fprintf(stderr, "mxserve bench: %s\n", v.status().to_string().c_str());
      return 1;
    }
    vision = *v;
  }
  if (a.json) {
    auto j = r->to_json();
    j["model"] = a.m.model;
    j["schemes"] = model->scheme_summary();
    j["kv_cache_dtype"] = kv_dtype_name(model->kv_dtype());
    j["lm_head"] = model->lm_head->scheme_name();
    j["threads"] = a.m.threads;
    if (vision) {
      j["vision"] = {
          {"image", a.image},
          {"grid_thw", {vision->grid.t, vision->grid.h, vision->grid.w}},
          {"patches", vision->patches},
          {"image_tokens", vision->tokens},
          {"s_per_image", vision->seconds},
          {"us_per_patch", 1e6 * vision->seconds / static_cast<double>(vision->patches)}};
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model: %s (%s, lm_head %s, kv cache %s), %d threads\n%s", a.m.model.c_str(),
              model->scheme_summary().c_str(), model->lm_head->scheme_name().c_str(),
              kv_dtype_name(model->kv_dtype()), a.m.threads, r->report().c_str());
  if (vision) {
    std::printf(
        "vision: %s image, %lld patches -> %lld tokens: %.3f ms per image, %.2f us per "
        "patch\n",
        a.image.c_str(), static_cast<long long>(vision->patches),
        static_cast<long long>(vision->tokens), 1e3 * vision->seconds,
        1e6 * vision->seconds / static_cast<double>(vision->patches));
  }
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
  cmd->add_option("--image", a->image,
                  "Also time the vision tower on a synthetic WIDTHxHEIGHT image (per image and "
                  "per patch)");
  add_speculative_flags(cmd, &a->spec);
  cmd->add_flag("--speculative-cost", a->spec_cost,
                "Time verify steps of K = 1..8 guesses against a decode step at a context of "
                "-p positions, and the speedup they imply");
  cmd->add_option("--speculative-reps", a->spec_reps, "Timings per width for --speculative-cost")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--text", a->text,
                  "With --speculative-algorithm: the prompt decoded with and without drafting "
                  "(default: a passage to repeat with an edit)");
  cmd->callback([a, &exit_code] { exit_code = bench(*a); });
}

}  // namespace mx::app
