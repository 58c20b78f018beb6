#include <chrono>
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "core/json_util.h"
#include "loader/model_text.h"
#include "runtime/generate.h"
#include "text/tokenizer.h"

namespace mx::app {
namespace {

struct RunArgs {
  ModelArgs m;
  std::string prompt;
  int64_t ctx = 0;
  bool json = false;
  SamplingParams sampling;
  SpeculativeOptions spec;
  std::vector<std::string> images;
};

int run(RunArgs& a) {
  const auto t0 = std::chrono::steady_clock::now();
  auto model = load_model_or_report(a.m, "run");
  if (!model) return 1;
  if (int code = 0; ep_worker_takes_over(*model, &code)) return code;
  auto tok = load_model_tokenizer(a.m.model);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "mxserve run: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t ctx = a.ctx > 0 ? std::min(a.ctx, model->config().max_position_embeddings)
                                : model->config().max_position_embeddings;
  // run renders no template, but the end of turn it names still ends a generation.
  const auto tmpl = load_model_chat_template(a.m.model);
  const auto stops =
      stop_token_ids_or_report(a.m.model, **tok, tmpl.is_ok() ? &*tmpl : nullptr, "run");
  if (!stops) return 1;
  a.sampling.stop_token_ids.insert(a.sampling.stop_token_ids.end(), stops->begin(), stops->end());
  std::vector<int32_t> prompt = (*tok)->encode(a.prompt);
  std::unique_ptr<MultimodalPrompt> mm;
  if (!a.images.empty()) {
    mm = multimodal_or_report(a.m, *model, prompt, a.images, "run");
    if (!mm) return 1;
    prompt = mm->ids;
  }
  std::function<void(const std::string&)> stream;
  if (!a.json) {
    std::fputs(a.prompt.c_str(), stdout);
    stream = [](const std::string& s) {
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    };
  }
  auto drafter = drafter_or_report(a.m, *model, a.spec, "run");
  if (!drafter) return 1;
  auto r = generate(*model, **tok, prompt, a.sampling, ctx, stream,
                    {.spec = a.spec, .drafter = drafter->drafter.get(), .multimodal = mm.get()});
  if (!r.is_ok()) {
    if (!a.json) std::fputs("\n", stdout);
    std::fprintf(stderr, "mxserve run: %s\n", r.status().to_string().c_str());
    return 1;
  }
  if (a.json) {
    Json out = {{"text", r->text},
                {"token_ids", r->token_ids},
                {"prompt_tokens", r->prompt_tokens},
                {"completion_tokens", r->token_ids.size()},
                {"finish_reason", r->finish_reason},
                {"prefill_tok_s", r->prefill_tok_s()},
                {"decode_tok_s", r->decode_tok_s()},
                {"load_s", load_s}};
    if (mm) {
      out["image_tokens"] = mm->image_tokens;
      out["vision_s"] = mm->tower_seconds;
    }
    if (a.spec.algorithm != SpecAlgorithm::kNone) {
      out["speculative"] = {{"algorithm", spec_algorithm_name(a.spec.algorithm)},
                            {"verify_steps", r->spec.verify_steps},
                            {"drafted", r->spec.drafted},
                            {"accepted", r->spec.accepted},
                            {"acceptance_rate", r->spec.acceptance_rate()},
                            {"mean_accepted_length", r->spec.mean_accepted_length()},
                            {"draft_s", r->spec.draft_seconds},
                            {"verify_s", r->spec.verify_seconds}};
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf(
      "\n\nprefill: %lld tokens, %.1f tok/s\ndecode:  %zu tokens, %.1f tok/s (%s)\nload:    "
      "%.3f s\n",
      static_cast<long long>(r->prompt_tokens), r->prefill_tok_s(), r->token_ids.size(),
      r->decode_tok_s(), r->finish_reason.c_str(), load_s);
  if (a.spec.algorithm != SpecAlgorithm::kNone) {
    std::printf(
        "speculative (%s): %lld of %lld drafted tokens accepted (%.0f%%), %.2f tokens per "
        "verify step\n",
        spec_algorithm_name(a.spec.algorithm), static_cast<long long>(r->spec.accepted),
        static_cast<long long>(r->spec.drafted), 100.0 * r->spec.acceptance_rate(),
        r->spec.mean_accepted_length());
  }
  return 0;
}

}  // namespace

void register_run(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<RunArgs>();
  a->sampling.temperature = 0.8f;
  a->sampling.top_p = 0.95f;
  a->sampling.max_tokens = 64;
  auto* cmd = app.add_subcommand("run", "Generate a continuation of a prompt");
  add_model_flags(cmd, &a->m);
  cmd->add_option("-p,--prompt", a->prompt, "Prompt text")->required();
  cmd->add_option("--ctx,--context-length", a->ctx, "Context length (default: the model's)")
      ->check(CLI::Range(int64_t{1}, kMaxConfigSize));
  cmd->add_flag("--json", a->json, "Print one JSON object instead of text");
  cmd->add_option("--image", a->images,
                  "An image (PNG, JPEG or WebP) for a vision model, repeatable; placed at the "
                  "prompt's <|image_pad|> tokens, or before the prompt");
  add_sampling_flags(cmd, &a->sampling);
  add_speculative_flags(cmd, &a->spec);
  cmd->callback([a, &exit_code] { exit_code = run(*a); });
}

}  // namespace mx::app
