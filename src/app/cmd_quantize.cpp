#include <algorithm>
#include <cstdio>
#include <optional>

#include "app/commands.h"
#include "core/thread_pool.h"
#include "model/export.h"

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
      "wrote %s: %s, %lld weights quantized, %lld kept FLOAT, %llu bytes in %lld shard(s)\n",
      a.out.c_str(), schemes.c_str(), static_cast<long long>(r->quantized),
      static_cast<long long>(r->kept_float), static_cast<unsigned long long>(r->bytes),
      static_cast<long long>(r->shards));
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
