#include <cstdio>
#include <optional>

#include "app/commands.h"
#include "core/json_util.h"
#include "core/mapped_file.h"
#include "loader/model_text.h"
#include "runtime/evaluate.h"
#include "runtime/generate.h"
#include "text/tokenizer.h"

namespace mx::app {
namespace {

struct EvalArgs {
  ModelArgs m;
  std::string ppl_file, task_file;
  PplOptions ppl;
  TaskOptions task;
  std::string format = "auto";
  std::string dump_file;
  int64_t max_new_tokens = 0;  // <= 0: task_max_new_tokens' default for each row's format
  bool compare_bf16 = false;
  std::string compare_to;  // --compare-to DIR
  bool json = false;
};

// --compare-to DIR: the same model from another checkpoint (its BF16 source, another export),
// loaded as stored with the FP32 KV cache. Null after printing why it cannot serve.
std::unique_ptr<DecoderModel> comparison_model(const EvalArgs& a, const DecoderModel& model) {
  ModelArgs r = a.m;
  r.model = a.compare_to;
  r.quantization.clear();
  r.rotation = "none";
  r.kv_cache_dtype = "auto";
  auto ref = load_model_or_report(r, "eval", false);
  if (!ref) return nullptr;
  const ModelConfig &x = model.config(), &y = ref->config();
  if (x.arch != y.arch || x.vocab_size != y.vocab_size || x.hidden_size != y.hidden_size ||
      x.num_layers != y.num_layers) {
    std::fprintf(stderr,
                 "mxserve eval: --compare-to %s is not the same model as %s (%s vs %s, vocabulary "
                 "%lld vs %lld, hidden %lld vs %lld, layers %lld vs %lld)\n",
                 a.compare_to.c_str(), a.m.model.c_str(), y.hf_class.c_str(), x.hf_class.c_str(),
                 static_cast<long long>(y.vocab_size), static_cast<long long>(x.vocab_size),
                 static_cast<long long>(y.hidden_size), static_cast<long long>(x.hidden_size),
                 static_cast<long long>(y.num_layers), static_cast<long long>(x.num_layers));
    return nullptr;
  }
  return ref;
}

int eval(EvalArgs& a) {
  if (a.ppl_file.empty() && a.task_file.empty()) {
    a.ppl_file = a.m.model + "/eval/prose_heldout.txt";
    a.task_file = a.m.model + "/eval/arith_heldout.jsonl";
  }
  auto model = load_model_or_report(a.m, "eval");
  if (!model) return 1;
  if (int code = 0; ep_worker_takes_over(*model, &code)) return code;
  std::unique_ptr<DecoderModel> ref;
  if (a.compare_bf16 && !a.compare_to.empty()) {
    std::fprintf(stderr, "mxserve eval: give one of --compare-bf16 and --compare-to\n");
    return 1;
  }
  if (!a.compare_to.empty()) {
    ref = comparison_model(a, *model);
    if (!ref) return 1;
  } else if (a.compare_bf16) {
    if (model->offline_quantized) {
      std::fprintf(stderr,
                   "mxserve eval: --compare-bf16 needs a BF16 checkpoint quantized online; "
                   "%s is quantized offline\n",
                   a.m.model.c_str());
      return 1;
    }
    // The reference is the unquantized model with the FP32 KV cache, so that KL also
    // measures what --kv-cache-dtype costs.
    ModelArgs r = a.m;
    r.quantization.clear();
    r.rotation = "none";
    r.kv_cache_dtype = "auto";
    ref = load_model_or_report(r, "eval", false);
    if (!ref) return 1;
  }
  auto tok = load_model_tokenizer(a.m.model);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "mxserve eval: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::string report;  // the task's figures as SGLang prints them
  Json out = {{"model", a.m.model},
              {"schemes", model->scheme_summary()},
              {"offline", model->offline_quantized}};
  if (!a.ppl_file.empty()) {
    auto text = read_text_file(a.ppl_file);
    if (!text.is_ok()) {
      std::fprintf(stderr, "mxserve eval: %s\n", text.status().to_string().c_str());
      return 1;
    }
    auto r = evaluate_perplexity(*model, ref.get(), (*tok)->encode(*text), a.ppl);
    if (!r.is_ok()) {
      std::fprintf(stderr, "mxserve eval: %s\n", r.status().to_string().c_str());
      return 1;
    }
    out["perplexity"] = r->perplexity();
    out["scored_tokens"] = r->scored_tokens;
    out["windows"] = r->windows;
    if (ref) {
      out["ref_perplexity"] = r->ref_perplexity();
      out["ppl_change"] = r->perplexity() / r->ref_perplexity() - 1.0;
      out["kl_mean"] = r->kl_sum / static_cast<double>(r->scored_tokens);
      out["top1_agreement"] =
          static_cast<double>(r->top1_agree) / static_cast<double>(r->scored_tokens);
    }
  }
  if (!a.task_file.empty()) {
    const auto tmpl = load_model_chat_template(a.m.model);
    const auto stops =
        stop_token_ids_or_report(a.m.model, **tok, tmpl.is_ok() ? &*tmpl : nullptr, "eval");
    if (!stops) return 1;
    auto format = parse_task_format(a.format);
    if (!format.is_ok()) {
      std::fprintf(stderr, "mxserve eval: --task-format: %s\n",
                   format.status().to_string().c_str());
      return 2;
    }
    a.task.format = *format;
    auto items = load_task(a.task_file, a.task);
    if (!items.is_ok()) {
      std::fprintf(stderr, "mxserve eval: %s\n", items.status().to_string().c_str());
      return 1;
    }
    auto r = evaluate_task(*model, ref.get(), **tok, *items, *stops, a.max_new_tokens);
    if (!r.is_ok()) {
      std::fprintf(stderr, "mxserve eval: %s\n", r.status().to_string().c_str());
      return 1;
    }
    if (!a.dump_file.empty()) {
      if (Status s = write_task_dump(a.dump_file, *items, *r); !s.is_ok()) {
        std::fprintf(stderr, "mxserve eval: %s\n", s.to_string().c_str());
        return 1;
      }
    }
    out["task_accuracy"] = r->accuracy();
    out["questions"] = r->questions;
    out.update(task_report_json(*r, task_name(a.task_file), "local", 1));
    if (ref) out["ref_task_accuracy"] = r->ref_accuracy();
    report = task_report(*r);
  }
  if (a.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("model:          %s (%s%s)\n", a.m.model.c_str(), model->scheme_summary().c_str(),
              model->offline_quantized ? ", offline" : "");
  if (out.contains("perplexity")) {
    std::printf("perplexity:     %.4f over %lld tokens in %lld windows\n",
                out["perplexity"].get<double>(),
                static_cast<long long>(out["scored_tokens"].get<int64_t>()),
                static_cast<long long>(out["windows"].get<int64_t>()));
  }
  if (out.contains("ref_perplexity")) {
    std::printf(
        "%s reference: perplexity %.4f (change %+.3f%%), mean KL %.5f, top-1 agreement %.2f%%\n",
        a.compare_to.empty() ? "bf16" : a.compare_to.c_str(), out["ref_perplexity"].get<double>(),
        100 * out["ppl_change"].get<double>(), out["kl_mean"].get<double>(),
        100 * out["top1_agreement"].get<double>());
  }
  if (out.contains("task_accuracy")) {
    std::printf("task accuracy:  %.3f over %lld questions", out["task_accuracy"].get<double>(),
                static_cast<long long>(out["questions"].get<int64_t>()));
    if (out.contains("ref_task_accuracy"))
      std::printf(" (reference %.3f)", out["ref_task_accuracy"].get<double>());
    std::printf("\n%s", report.c_str());
  }
  return 0;
}

}  // namespace

void register_eval(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand(
      "eval", "Perplexity and few-shot task accuracy (default: the model's eval/ sets)");
  add_model_flags(cmd, &a->m);
  cmd->add_option("--ppl", a->ppl_file, "Text file for perplexity");
  cmd->add_option("--ctx", a->ppl.ctx, "Window length")->capture_default_str();
  cmd->add_option("--stride", a->ppl.stride, "Window stride (= ctx: non-overlapping)")
      ->capture_default_str();
  cmd->add_option("--max-windows", a->ppl.max_windows, "Stop after this many windows (0: all)");
  cmd->add_option("--task", a->task_file, "JSONL with prompt (or question) and answer per row");
  cmd->add_option("--task-format", a->format,
                  "auto (rows whose answer holds '####' are gsm8k), line or gsm8k")
      ->capture_default_str();
  cmd->add_option("--shots", a->task.shots,
                  "Build prompts with this many worked examples from the file's first rows "
                  "(default: each row's own prompt; gsm8k rows without one: 5)");
  cmd->add_option("--shots-file", a->task.shots_file,
                  "Take the examples from this JSONL instead, and score every task row");
  cmd->add_option("--max-questions", a->task.max_questions,
                  "Stop after this many questions (0: all)");
  cmd->add_option("--max-new-tokens", a->max_new_tokens,
                  "Answer length limit (default: 8 for one-line answers, 512 for gsm8k)");
  cmd->add_option("--dump", a->dump_file,
                  "Write each question's label, prediction and generated text (JSONL)");
  cmd->add_flag("--compare-bf16", a->compare_bf16,
                "Also run the BF16 model (FP32 KV cache): KL, top-1 agreement, deltas");
  cmd->add_option("--compare-to", a->compare_to,
                  "Also run this checkpoint of the same model as stored (its BF16 source, "
                  "another export), FP32 KV cache: KL, top-1 agreement, deltas against it");
  cmd->add_flag("--json", a->json, "Print one JSON object");
  cmd->callback([a, &exit_code] { exit_code = eval(*a); });
}

}  // namespace mx::app
