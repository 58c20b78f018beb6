#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <thread>

#include "app/commands.h"
#include "core/log.h"
#include "loader/checkpoint_format.h"
#include "loader/model_text.h"
#include "media/image.h"
#include "runtime/ep_runtime.h"

namespace mx::app {

std::string default_model_dir() {
  namespace fs = std::filesystem;
  const fs::path rel = "models/tiny-qwen3-moe";
  std::error_code ec;
  if (fs::is_directory(rel, ec)) return rel.string();
  const fs::path src = fs::path(MX_SOURCE_DIR) / rel;
  if (fs::is_directory(src, ec)) return src.string();
  return rel.string();
}

int default_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

namespace {

// The server's bounds for a sampling flag (sampling_param_error), so the CLI accepts exactly
// what a request may carry. A value that is not a number is left to the flag's conversion.
CLI::Validator sampling_bounds(const char* param) {
  return CLI::Validator(
      [param](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "";
        return sampling_param_error(param, v);
      },
      "", param);
}

}  // namespace

void add_speculative_flags(CLI::App* cmd, SpeculativeOptions* s) {
  cmd->add_option_function<std::string>(
         "--speculative-algorithm",
         [s](const std::string& name) {
           auto a = parse_spec_algorithm(name);
           if (!a.is_ok()) throw CLI::ValidationError(a.status().message());
           s->algorithm = *a;
         },
         "Speculative decoding: none, ngram (prompt lookup), mtp (the checkpoint's MTP layer) "
         "or draft (a smaller model with the same tokenizer)")
      ->default_str("none");
  cmd->add_option("--speculative-draft-model-path", s->draft_model_path,
                  "The draft model for --speculative-algorithm draft (a checkpoint directory or "
                  "GGUF file)");
  cmd->add_option("--speculative-num-draft-tokens", s->num_draft_tokens,
                  "The most tokens one step drafts; fewer when they do not pay")
      ->check(CLI::Range(1, kMaxDraftTokens))
      ->capture_default_str();
}

void add_sampling_flags(CLI::App* cmd, SamplingParams* p) {
  cmd->add_option("-n,--max-tokens", p->max_tokens, "Tokens to generate at most")
      ->check(CLI::Range(1, std::numeric_limits<int>::max()))
      ->capture_default_str();
  cmd->add_option("--temperature,--temp", p->temperature, "0 means greedy")
      ->check(sampling_bounds("temperature"))
      ->capture_default_str();
  cmd->add_option("--top-k", p->top_k, "Keep the k most likely tokens (0: off)")
      ->check(sampling_bounds("top_k"))
      ->capture_default_str();
  cmd->add_option("--top-p", p->top_p, "Nucleus sampling mass (1: off)")
      ->check(sampling_bounds("top_p"))
      ->capture_default_str();
  cmd->add_option("--min-p", p->min_p, "Drop tokens below min-p times the top probability")
      ->check(sampling_bounds("min_p"))
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", p->repetition_penalty, "HF-style, 1: off")
      ->check(sampling_bounds("repetition_penalty"))
      ->capture_default_str();
  cmd->add_option("--presence-penalty", p->presence_penalty, "OpenAI-style")
      ->check(sampling_bounds("presence_penalty"))
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", p->frequency_penalty, "OpenAI-style")
      ->check(sampling_bounds("frequency_penalty"))
      ->capture_default_str();
  // A seed past 64 bits would otherwise be accepted as some other seed.
  cmd->add_option_function<uint64_t>(
         "--seed", [p](uint64_t s) { p->seed = s; }, "Seed for reproducible sampling")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            errno = 0;
            char* end = nullptr;
            if (!text.empty() && text[0] == '-') {
              (void)std::strtoll(text.c_str(), &end, 10);
            } else {
              (void)std::strtoull(text.c_str(), &end, 10);
            }
            return errno != 0 || end == text.c_str() || *end != '\0'
                       ? "seed must be an integer of at most 64 bits, got " + text
                       : "";
          },
          ""));
  cmd->add_option("--stop", p->stop, "Stop string (repeatable)")
      ->check(CLI::Validator(
          [](std::string& s) { return s.empty() ? "a stop string cannot be empty" : ""; }, ""));
  cmd->add_option("--stop-token-id", p->stop_token_ids, "Stop token id (repeatable)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--ignore-eos", p->ignore_eos, "Keep generating past end-of-sequence tokens");
}

std::function<void(int64_t, int64_t)> terminal_progress(const char* what, const char* unit) {
  if (::isatty(STDERR_FILENO) == 0) return nullptr;
  return [what, unit](int64_t done, int64_t total) {
    const int width = 30;
    const int fill = static_cast<int>(width * done / std::max<int64_t>(total, 1));
    std::fprintf(stderr, "\r%s [%.*s%*s] %lld/%lld %s", what, fill,
                 "##############################", width - fill, "", static_cast<long long>(done),
                 static_cast<long long>(total), unit);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

void add_model_flags(CLI::App* cmd, ModelArgs* a) {
  cmd->add_option("-m,--model", a->model,
                  "Model directory (HF, or msmodelslim with "
                  "quant_model_description.json, detected without a flag) or a .gguf file")
      ->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Threads")
      ->check(CLI::Range(1, kMaxThreads))
      ->capture_default_str();
  cmd->add_option("--quantization", a->quantization,
                  "Quantize a BF16/FP16 checkpoint at load: mxfp8 (W8A8), mxfp_w4a8, mxfp4 "
                  "(dual-level W4A4), or a scheme name (w4a4_mxfp4, ...); modelslim accepts an "
                  "offline checkpoint as it is")
      ->check([](const std::string& v) {
        return v == "modelslim" || scheme_from_quantization_flag(v)
                   ? std::string()
                   : "unknown quantization '" + v + "'";
      });
  cmd->add_option("--gguf-dequant", a->gguf_dequant,
                  "How a GGUF's weights run: none keeps them in their blocks (llama.cpp's "
                  "memory); bf16 dequantizes every tensor to BF16 at load")
      ->check(CLI::IsMember({"none", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--gguf-activations", a->gguf_activations,
                  "How activations meet GGUF blocks kept as stored: native quantizes each row "
                  "to the type's dot-product type (Q8_0, Q8_K) for integer dot products, as "
                  "llama.cpp does; f32 keeps FP32 activations (exact, slower)")
      ->check(CLI::IsMember({"native", "f32"}))
      ->capture_default_str();
  cmd->add_option("--mx-scale-rule", a->scale_rule, "E8M0 scale rule for online quantization")
      ->check(CLI::IsMember({"floor", "rceil"}))
      ->capture_default_str();
  cmd->add_option("--rotation", a->rotation,
                  "With --quantization: rotate weights and activations by block Hadamard "
                  "transforms along K before quantizing (block32, block128), which spreads "
                  "outliers across each MX block")
      ->check(CLI::IsMember({"none", "block32", "block128"}))
      ->capture_default_str();
  cmd->add_flag("--quantize-lm-head", a->quantize_lm_head,
                "With --quantization, quantize lm_head in the same scheme (default: BF16)");
  cmd->add_option("--kv-cache-dtype", a->kv_cache_dtype,
                  "KV cache storage: auto (fp32, the attention's precision), fp32, bf16 (half "
                  "the memory and reads) or fp8_e4m3 (fp8: a quarter, each row with its own "
                  "scale)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp8", "fp8_e4m3"}))
      ->capture_default_str();
  cmd->add_option("--ep-size", a->ep_size,
                  "Expert parallelism: split each layer's experts over N processes, started as "
                  "mpirun -np N mxserve ... --ep-size N")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--tp-size", a->tp_size,
                  "Tensor parallelism: split each layer's heads and widths (and lm_head's "
                  "vocabulary) over N processes, started as mpirun -np N mxserve ... --tp-size N")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_flag("--enable-dp-attention", a->dp_attention,
                "With --ep-size: each rank runs attention for its own requests (the engine "
                "balances them over the ranks), and MoE layers exchange each rank's rows");
  cmd->add_flag("--enable-dp-lm-head", a->dp_lm_head,
                "With --enable-dp-attention: split lm_head by vocabulary over the ranks (else "
                "each rank holds it whole for its own rows)");
  cmd->add_option("--ep-dispatch", a->ep_dispatch,
                  "How routed rows travel between ranks: normal (BF16), low_latency (the expert "
                  "kernel's format, fixed receive slots) or auto (normal for steps with prefill)")
      ->check(CLI::IsMember({"normal", "low_latency", "auto"}))
      ->capture_default_str();
  cmd->add_option("--ep-max-dispatch-tokens", a->ep_max_dispatch_tokens,
                  "Tokens per rank a low-latency step may carry (its receive slots); more go in "
                  "normal mode")
      ->check(CLI::Range(int64_t{1}, kMaxEpDispatchTokens))
      ->capture_default_str();
}

namespace {

Comm* g_ep = nullptr;
bool g_workers_running = false;

int world_size_from_launcher() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return 1;
}

// The communicator of --ep-size or --tp-size, or an error naming what is wrong with the launch.
Result<Comm*> ep_setup(const ModelArgs& a) {
  const int launched = launched_by_mpi() ? world_size_from_launcher() : 1;
  if (a.ep_size > 1 && a.tp_size > 1 && a.ep_size != a.tp_size) {
    return invalid_argument("--ep-size " + std::to_string(a.ep_size) + " beside --tp-size " +
                            std::to_string(a.tp_size) +
                            ": the experts split over the tensor-parallel ranks, so --ep-size "
                            "must equal --tp-size (or be 1)");
  }
  if (a.tp_size > 1 && a.dp_attention) {
    return invalid_argument("--enable-dp-attention runs beside --ep-size, not --tp-size");
  }
  if ((a.dp_attention || a.dp_lm_head) && a.ep_size <= 1) {
    return invalid_argument(
        std::string(a.dp_attention ? "--enable-dp-attention" : "--enable-dp-lm-head") +
        " needs --ep-size N (data-parallel attention runs beside expert parallelism)");
  }
  if (a.dp_lm_head && !a.dp_attention) {
    return invalid_argument("--enable-dp-lm-head needs --enable-dp-attention");
  }
  const bool tp = a.tp_size > 1;
  const std::string flag = tp ? "--tp-size" : "--ep-size";
  const int size = tp ? a.tp_size : a.ep_size;
  if (size == 1) {
    if (launched > 1) {
      return invalid_argument("mpirun started " + std::to_string(launched) +
                              " processes but --ep-size and --tp-size are 1; pass --ep-size " +
                              std::to_string(launched) + " or --tp-size " +
                              std::to_string(launched));
    }
    return static_cast<Comm*>(nullptr);
  }
  if (g_ep != nullptr) return g_ep;
  const std::string n = std::to_string(size);
  if (!launched_by_mpi()) {
    return invalid_argument(flag + " " + n + " runs as " + n +
                            " processes: start it as mpirun -np " + n + " mxserve ... " + flag +
                            " " + n);
  }
  MX_ASSIGN_OR_RETURN(Comm * w, mpi_world());
  if (w->size() != size) {
    return invalid_argument(flag + " " + n + " but mpirun started " + std::to_string(w->size()) +
                            " processes");
  }
  set_log_rank(w->rank());
  g_ep = w;
  return w;
}

}  // namespace

Comm* ep_comm() { return g_ep; }

bool ep_worker_takes_over(DecoderModel& model, int* exit_code) {
  if (g_ep == nullptr) return false;
  if (g_ep->rank() == 0) {
    install_step_broadcast(model, *g_ep);
    g_workers_running = true;
    return false;
  }
  const Status st = run_ep_worker(model, *g_ep);
  if (!st.is_ok()) MX_LOG_ERROR("expert-parallel worker: " + st.to_string());
  *exit_code = st.is_ok() ? 0 : 1;
  return true;
}

int ep_finish(int exit_code) {
  if (g_ep == nullptr) return exit_code;
  if (g_ep->rank() == 0) {
    if (exit_code != 0 && g_workers_running) g_ep->abort("the command failed");
    if (g_workers_running) {
      const Status st = ep_end_workers(*g_ep);
      if (!st.is_ok()) g_ep->abort("ending the workers failed: " + st.to_string());
    }
  }
  g_ep = nullptr;
  mpi_finalize();
  return exit_code;
}

std::optional<std::vector<int32_t>> stop_token_ids_or_report(const std::string& model,
                                                             const Tokenizer& tok,
                                                             const ChatTemplate* tmpl,
                                                             const char* command) {
  auto ids = checkpoint_stop_token_ids(model, tok, tmpl);
  if (!ids.is_ok()) {
    std::fprintf(stderr, "mxserve %s: %s\n", command, ids.status().to_string().c_str());
    return std::nullopt;
  }
  return std::move(ids).value();
}

namespace {

// What the model flags ask of the loader, expert parallelism aside.
LoadOptions load_options_of(const ModelArgs& a) {
  LoadOptions opt;
  opt.threads = a.threads;
  if (a.quantization == "modelslim") {
    opt.expect_modelslim = true;
  } else if (!a.quantization.empty()) {
    opt.quantization = scheme_from_quantization_flag(a.quantization);
  }
  opt.gguf_dequant_bf16 = a.gguf_dequant == "bf16";
  opt.gguf_activations =
      a.gguf_activations == "f32" ? GgmlActivations::kF32 : GgmlActivations::kNative;
  parse_scale_rule(a.scale_rule, &opt.scale_rule);
  opt.quantize_lm_head = a.quantize_lm_head;
  opt.rotation = a.rotation == "block32" ? 32 : a.rotation == "block128" ? 128 : 0;
  opt.kv_dtype = a.kv_cache_dtype == "bf16"                                    ? KvDtype::kBF16
                 : a.kv_cache_dtype == "fp8" || a.kv_cache_dtype == "fp8_e4m3" ? KvDtype::kFp8E4M3
                                                                               : KvDtype::kF32;
  return opt;
}

}  // namespace

namespace {

// The draft model of --speculative-algorithm draft, loaded alone with the target's flags
// (scheme, threads, KV storage) once it is known to speak the target's tokenizer: guesses are
// token ids, which mean nothing under another vocabulary.
Result<std::unique_ptr<DecoderModel>> load_draft_model(const ModelArgs& a,
                                                       const DecoderModel& target,
                                                       const SpeculativeOptions& spec) {
  const std::string& path = spec.draft_model_path;
  if (spec.algorithm != SpecAlgorithm::kDraft) {
    return invalid_argument("--speculative-draft-model-path needs --speculative-algorithm draft");
  }
  if (path.empty()) {
    return invalid_argument("--speculative-algorithm draft needs --speculative-draft-model-path");
  }
  MX_ASSIGN_OR_RETURN(const auto mine, load_model_tokenizer(a.model));
  auto theirs = load_model_tokenizer(path);
  if (!theirs.is_ok()) return theirs.status().with_context("draft model " + path);
  if ((*theirs)->vocab_size() != mine->vocab_size()) {
    return invalid_argument("draft model " + path + ": its tokenizer has " +
                            std::to_string((*theirs)->vocab_size()) + " tokens, the target's " +
                            std::to_string(mine->vocab_size()) +
                            "; a draft model must share the target's tokenizer");
  }
  for (int32_t id = 0; id < mine->vocab_size(); ++id) {
    if ((*theirs)->token_bytes(id) != mine->token_bytes(id)) {
      return invalid_argument("draft model " + path + ": token " + std::to_string(id) +
                              " differs from the target's; a draft model must share the "
                              "target's tokenizer");
    }
  }
  auto m = load_model(path, load_options_of(a));
  if (!m.is_ok()) return m.status().with_context("draft model " + path);
  return m;
}

Result<MultimodalPrompt> multimodal_prompt(const ModelArgs& a, DecoderModel& model,
                                           std::vector<int32_t> ids,
                                           const std::vector<std::string>& files,
                                           std::unique_ptr<VisionTower>& tower) {
  if (model.replays_steps()) {
    return unimplemented(
        "images under --ep-size or --tp-size are not available yet (the vision tower's rows "
        "do not travel to the other ranks)");
  }
  if (!tower) {
    MX_ASSIGN_OR_RETURN(tower, load_vision_tower(a.model, load_options_of(a), &model.pool()));
  }
  MX_ASSIGN_OR_RETURN(VisionPreprocessConfig pre, read_preprocessor_config(a.model));
  std::vector<PixelPatches> images;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return not_found(f + ": cannot open the image");
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), {}};
    auto img = decode_image(bytes.data(), bytes.size());
    if (!img.is_ok()) return invalid_argument(f + ": " + img.status().message());
    MX_ASSIGN_OR_RETURN(PixelPatches px, preprocess_image(*img, pre));
    images.push_back(std::move(px));
  }
  const VisionConfig& v = tower->config();
  if (std::count(ids.begin(), ids.end(), v.image_token_id) == 0) {
    std::vector<int32_t> marked = image_markers(v, static_cast<int64_t>(files.size()));
    marked.insert(marked.end(), ids.begin(), ids.end());
    ids = std::move(marked);
  }
  return build_multimodal_prompt(*tower, ids, images);
}

}  // namespace

std::unique_ptr<MultimodalPrompt> multimodal_or_report(const ModelArgs& a, DecoderModel& model,
                                                       std::vector<int32_t> ids,
                                                       const std::vector<std::string>& files,
                                                       const char* command,
                                                       std::unique_ptr<VisionTower>* tower) {
  std::unique_ptr<VisionTower> own;
  auto p = multimodal_prompt(a, model, std::move(ids), files, tower != nullptr ? *tower : own);
  if (!p.is_ok()) {
    std::fprintf(stderr, "mxserve %s: %s\n", command, p.status().to_string().c_str());
    return nullptr;
  }
  return std::make_unique<MultimodalPrompt>(std::move(p).value());
}

std::unique_ptr<VisionTower> vision_tower_or_report(const ModelArgs& a, DecoderModel& model,
                                                    const char* command, bool* failed) {
  *failed = false;
  if (!model.config().vision.present() || model.replays_steps()) return nullptr;
  auto t = load_vision_tower(a.model, load_options_of(a), &model.pool());
  if (!t.is_ok()) {
    std::fprintf(stderr, "mxserve %s: vision tower: %s\n", command, t.status().to_string().c_str());
    *failed = true;
    return nullptr;
  }
  return std::move(t).value();
}

std::optional<SpecDrafter> drafter_or_report(const ModelArgs& a, DecoderModel& model,
                                             const SpeculativeOptions& spec, const char* command) {
  SpecDrafter d;
  if (spec.algorithm == SpecAlgorithm::kDraft || !spec.draft_model_path.empty()) {
    auto m = load_draft_model(a, model, spec);
    if (!m.is_ok()) {
      std::fprintf(stderr, "mxserve %s: %s\n", command, m.status().to_string().c_str());
      return std::nullopt;
    }
    d.head = std::move(m).value();
    d.drafter = std::make_unique<DraftModelDrafter>(*d.head, model.config().vocab_size);
    return d;
  }
  if (spec.algorithm != SpecAlgorithm::kMtp) return d;
  if (model.replays_steps()) {
    std::fprintf(stderr, "mxserve %s: %s\n", command, kNoMtpUnderEp);
    return std::nullopt;
  }
  auto head = load_mtp_head(a.model, model, load_options_of(a));
  if (!head.is_ok()) {
    std::fprintf(stderr, "mxserve %s: %s\n", command, head.status().to_string().c_str());
    return std::nullopt;
  }
  d.head = std::move(head).value();
  d.drafter = std::make_unique<MtpDrafter>(*d.head);
  return d;
}

std::unique_ptr<DecoderModel> load_model_or_report(const ModelArgs& a, const char* command,
                                                   bool expert_parallel) {
  const std::string& dir = a.model;
  LoadOptions opt = load_options_of(a);
  if (expert_parallel) {
    auto comm = ep_setup(a);
    if (!comm.is_ok()) {
      std::fprintf(stderr, "mxserve %s: %s\n", command, comm.status().message().c_str());
      return nullptr;
    }
    if (a.tp_size > 1) {
      opt.tp.comm = *comm;
      // --ep-size N beside --tp-size N: whole experts a share a rank (model/weights.h).
      if (a.ep_size > 1) opt.ep.comm = *comm;
    } else {
      opt.ep.comm = *comm;
      parse_ep_dispatch(a.ep_dispatch, &opt.ep.mode);
      opt.ep.max_dispatch_tokens = a.ep_max_dispatch_tokens;
      opt.ep.dp_attention = a.dp_attention;
      opt.ep.dp_lm_head = a.dp_lm_head;
    }
  }
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  opt.progress = terminal_progress("loading", "layers");
  auto m = load_model(dir, opt);
  if (!m.is_ok()) {
    if (tty) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "mxserve %s: cannot load %s: %s\n", command, dir.c_str(),
                 m.status().to_string().c_str());
    return nullptr;
  }
  return std::move(m).value();
}

}  // namespace mx::app
