#include <algorithm>
#include <cstdio>
#include <optional>

#include <chrono>
#include <fstream>

#include "app/commands.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "loader/model_config.h"
#include "loader/model_text.h"
#include "model/calibrate.h"
#include "model/export.h"
#include "model/model.h"
#include "runtime/sampler.h"
#include "text/tokenizer.h"

namespace mx::app {
namespace {

struct QuantizeArgs {
  std::string model = default_model_dir();
  std::string out;
  std::string scheme;
  std::string rule = "floor";
  std::vector<std::string> keep_float;
  std::vector<std::string> module_schemes;
  uint64_t max_shard_mb = 4096;
  bool quantize_lm_head = false;
  std::string rotation = "none";
  std::string method = "rtn";
  std::string calib;
  int64_t calib_tokens = 16384;
  int64_t calib_generate = 0;
  uint64_t calib_seed = 0;
  int64_t calib_ctx = 512;
  bool act_order = false;
  bool input_aware = false;
  bool own_targets = false;
  double damp = 0.01;
  bool force = false;
  int threads = default_threads();
};

// An MX scheme by its msmodelslim type or its --quantization name; null with a message.
std::optional<Scheme> mx_scheme_named(const std::string& name, const std::string& what) {
  auto s = scheme_from_offline_type(name);
  if (!s) s = scheme_from_quantization_flag(name);
  if (!s || *s == Scheme::kBf16) {
    std::fprintf(stderr,
                 "mxserve quantize: unknown scheme '%s'%s (W8A8_MXFP8, W4A8_MXFP, W4A4_MXFP4, "
                 "W4A4_MXFP4_DUALSCALE)\n",
                 name.c_str(), what.c_str());
    return std::nullopt;
  }
  return s;
}

// The process's peak resident memory, from the kernel's accounting.
uint64_t peak_rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) << 10;
  }
  return 0;
}

// The calibration text in windows of `ctx` tokens, `total` tokens at most.
Result<std::vector<std::vector<int32_t>>> calibration_windows(const QuantizeArgs& a) {
  MX_ASSIGN_OR_RETURN(std::string text, read_text_file(a.calib));
  MX_ASSIGN_OR_RETURN(auto tok, load_model_tokenizer(a.model));
  MX_ASSIGN_OR_RETURN(ModelConfig config, load_model_config(a.model));
  const int64_t ctx = std::min<int64_t>(a.calib_ctx, config.max_position_embeddings);
  const std::vector<int32_t> ids = tok->encode(text);
  std::vector<std::vector<int32_t>> windows;
  for (size_t at = 0;
       at + 1 < ids.size() && static_cast<int64_t>(windows.size()) * ctx < a.calib_tokens;
       at += static_cast<size_t>(ctx)) {
    const size_t end = std::min(ids.size(), at + static_cast<size_t>(ctx));
    windows.emplace_back(ids.begin() + static_cast<std::ptrdiff_t>(at),
                         ids.begin() + static_cast<std::ptrdiff_t>(end));
  }
  if (windows.empty()) return invalid_argument(a.calib + ": no calibration tokens");
  return windows;
}

// Calibration windows the floating-point model samples itself (temperature 1, seeded), each
// from its beginning-of-text token: text from the distribution the model learned, when no
// calibration text is at hand.
Result<std::vector<std::vector<int32_t>>> generated_windows(const QuantizeArgs& a) {
  LoadOptions lo;
  lo.threads = a.threads;
  MX_ASSIGN_OR_RETURN(std::unique_ptr<DecoderModel> model, load_model(a.model, lo));
  const ModelConfig& c = model->config();
  const int64_t start = c.bos_token_id >= 0 ? c.bos_token_id : c.eos_token_id;
  if (start < 0 || start >= c.vocab_size) {
    return invalid_argument(a.model + ": no beginning-of-text token to sample calibration from");
  }
  const int64_t ctx = std::min<int64_t>(a.calib_ctx, c.max_position_embeddings);
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = a.calib_seed;
  Sampler sampler(p);
  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  std::vector<std::vector<int32_t>> windows;
  for (int64_t total = 0; total < a.calib_generate;) {
    std::vector<int32_t> w{static_cast<int32_t>(start)};
    KvCache cache(c, ctx);
    while (true) {
      MX_RETURN_IF_ERROR(model->forward(&w.back(), 1, cache, false, logits.data()));
      if (static_cast<int64_t>(w.size()) == ctx ||
          total + static_cast<int64_t>(w.size()) >= a.calib_generate)
        break;
      w.push_back(sampler.sample(logits.data(), c.vocab_size, {}, w));
    }
    total += static_cast<int64_t>(w.size());
    windows.push_back(std::move(w));
  }
  return windows;
}

// GPTQ's weights for the export `opt` describes; false after reporting the error.
bool calibrate(const QuantizeArgs& a, const ExportOptions& opt, CalibrationResult* out) {
  const auto t0 = std::chrono::steady_clock::now();
  auto windows = a.calib_generate > 0 ? generated_windows(a) : calibration_windows(a);
  if (!windows.is_ok()) {
    std::fprintf(stderr, "mxserve quantize: --calib: %s\n", windows.status().to_string().c_str());
    return false;
  }
  CalibrationOptions co;
  co.gptq.damp = a.damp;
  co.gptq.act_order = a.act_order;
  co.input_aware = a.input_aware;
  co.float_targets = !a.own_targets;
  co.rule = opt.rule;
  co.rotation = opt.rotation;
  co.threads = a.threads;
  co.scheme_of = [&](const std::string& name) { return export_scheme(name, 2, opt); };
  co.progress = terminal_progress("calibrating", "layers");
  auto r = gptq_calibrate(a.model, *windows, co);
  if (!r.is_ok()) {
    std::fprintf(stderr, "mxserve quantize: %s\n", r.status().to_string().c_str());
    return false;
  }
  *out = std::move(*r);
  std::printf(
      "GPTQ: %lld weights from %lld calibration tokens in %.1f s (%lld experts took their "
      "layer's Hessian)\n",
      static_cast<long long>(out->weights.size()), static_cast<long long>(out->tokens),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
      static_cast<long long>(out->pooled_experts));
  return true;
}

int quantize(const QuantizeArgs& a) {
  ExportOptions opt;
  auto s = mx_scheme_named(a.scheme, "");
  if (!s) return 1;
  opt.scheme = *s;
  for (const std::string& m : a.module_schemes) {
    const size_t eq = m.rfind('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "mxserve quantize: --module-scheme '%s' is not PATTERN=SCHEME\n",
                   m.c_str());
      return 1;
    }
    auto ms = mx_scheme_named(m.substr(eq + 1), " in --module-scheme '" + m + "'");
    if (!ms) return 1;
    opt.module_schemes.emplace_back(m.substr(0, eq), *ms);
  }
  parse_scale_rule(a.rule, &opt.rule);
  opt.keep_float = a.keep_float;
  opt.quantize_lm_head = a.quantize_lm_head;
  opt.rotation = a.rotation == "block32" ? 32 : a.rotation == "block128" ? 128 : 0;
  opt.max_shard_bytes = a.max_shard_mb << 20;
  opt.overwrite = a.force;
  if (a.method == "gptq" && a.calib.empty() == (a.calib_generate == 0)) {
    std::fprintf(stderr,
                 "mxserve quantize: --method gptq needs one of --calib FILE (calibration text) "
                 "and --calib-generate N\n");
    return 1;
  }
  if (a.method == "rtn" && (!a.calib.empty() || a.calib_generate > 0)) {
    std::fprintf(stderr, "mxserve quantize: calibration is for --method gptq only\n");
    return 1;
  }
  CalibrationResult calibrated;
  if (a.method == "gptq") {
    if (!calibrate(a, opt, &calibrated)) return 1;
    opt.calibrated = &calibrated.weights;
  }
  opt.progress = terminal_progress("quantizing", "tensors");
  ThreadPool pool(std::max(1, a.threads));
  opt.pool = &pool;
  auto r = export_msmodelslim(a.model, a.out, opt);
  if (!r.is_ok()) {
    std::fprintf(stderr, "mxserve quantize: %s\n", r.status().to_string().c_str());
    return 1;
  }
  std::string schemes(scheme_info(opt.scheme).offline_type);
  for (const auto& [pattern, scheme] : opt.module_schemes)
    schemes += ", " + std::string(scheme_info(scheme).offline_type) + " for '" + pattern + "'";
  std::printf(
      "wrote %s: %s, %lld weights quantized (%lld by GPTQ), %lld kept FLOAT, %llu bytes in %lld "
      "shard(s), peak memory %.0f MiB\n",
      a.out.c_str(), schemes.c_str(), static_cast<long long>(r->quantized),
      static_cast<long long>(r->calibrated), static_cast<long long>(r->kept_float),
      static_cast<unsigned long long>(r->bytes), static_cast<long long>(r->shards),
      static_cast<double>(peak_rss_bytes()) / (1 << 20));
  return 0;
}

}  // namespace

void register_quantize(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<QuantizeArgs>();
  auto* cmd = app.add_subcommand("quantize", "Write an offline MX checkpoint (msmodelslim layout)");
  cmd->add_option("-m,--model", a->model, "BF16/FP16 Hugging Face checkpoint")
      ->capture_default_str();
  cmd->add_option("-o,--output", a->out, "Output directory")->required();
  cmd->add_option("--scheme", a->scheme,
                  "W8A8_MXFP8 | W4A8_MXFP | W4A4_MXFP4 | W4A4_MXFP4_DUALSCALE")
      ->required();
  cmd->add_option("-t,--threads", a->threads, "Threads")
      ->check(CLI::Range(1, kMaxThreads))
      ->capture_default_str();
  cmd->add_option("--mx-scale-rule", a->rule, "E8M0 scale rule")
      ->check(CLI::IsMember({"floor", "rceil"}))
      ->capture_default_str();
  cmd->add_option("--keep-float", a->keep_float,
                  "Keep tensors whose name contains PATTERN in FLOAT (repeatable)");
  cmd->add_option("--module-scheme", a->module_schemes,
                  "Weights whose name contains PATTERN take SCHEME (PATTERN=SCHEME, repeatable, "
                  "the first match wins; one matching lm_head quantizes it)");
  cmd->add_option("--rotation", a->rotation,
                  "Rotate every quantized weight by block Hadamard transforms along K first "
                  "(block32, block128), recorded in the description; the loader rotates the "
                  "activations to match")
      ->check(CLI::IsMember({"none", "block32", "block128"}))
      ->capture_default_str();
  cmd->add_option("--method", a->method,
                  "rtn: round to nearest; gptq: GPTQ on calibration text (--calib), layer by "
                  "layer, with the block scales chosen after the error of earlier columns")
      ->check(CLI::IsMember({"rtn", "gptq"}))
      ->capture_default_str();
  cmd->add_option("--calib", a->calib, "Calibration text for --method gptq (UTF-8)");
  cmd->add_option("--calib-generate", a->calib_generate,
                  "Calibrate on this many tokens the unquantized model samples itself "
                  "(temperature 1), instead of --calib")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_option("--calib-seed", a->calib_seed, "Seed of --calib-generate")->capture_default_str();
  cmd->add_option("--calib-tokens", a->calib_tokens, "Calibration tokens at most")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--calib-ctx", a->calib_ctx,
                  "Calibration window in tokens (at most the model's max_position_embeddings)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_flag("--act-order", a->act_order,
                "GPTQ: quantize columns in order of decreasing input energy (scales then chosen "
                "up front)");
  cmd->add_flag("--gptq-input-aware", a->input_aware,
                "GPTQ: first fit the weights, in least squares, to the inputs as the scheme "
                "quantizes them (wants many calibration tokens; few overfit)");
  cmd->add_flag("--gptq-own-targets", a->own_targets,
                "GPTQ: fit each linear to its inputs in the partly quantized model alone, not to "
                "what the unquantized model gives it (which corrects the error of the layers "
                "below, and runs the unquantized model beside)");
  cmd->add_option("--gptq-damp", a->damp,
                  "GPTQ: added to the Hessian's diagonal as a fraction of its mean")
      ->check(CLI::Range(1e-6, 10.0))
      ->capture_default_str();
  cmd->add_flag("--quantize-lm-head", a->quantize_lm_head,
                "Quantize lm_head in the same scheme (default: keep it FLOAT)");
  cmd->add_option("--max-shard-size", a->max_shard_mb, "Shard size limit in MiB (1 to 1 TiB)")
      ->check(CLI::Range(kMinShardBytes >> 20, kMaxShardBytes >> 20))
      ->capture_default_str();
  cmd->add_flag("--force", a->force,
                "Write into a non-empty output directory (its previous weights are removed)");
  cmd->callback([a, &exit_code] { exit_code = quantize(*a); });
}

}  // namespace mx::app
