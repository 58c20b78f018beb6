#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "core/log.h"
#include "loader/model_text.h"
#include "media/vision_preprocess.h"
#include "runtime/generate.h"
#include "server/openai_server.h"
#include "server/tool_parser.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mx::app {
namespace {

struct ServeArgs {
  ModelArgs m;
  ServerConfig server;
  bool auto_tool_choice = false;
  std::string pooling = "auto";
  // 0: room for max_running_requests full contexts, capped at 1M tokens and at a quarter of
  // physical memory.
  int64_t max_total_tokens = 0;
  std::string limit_mm;  // --limit-mm-per-prompt
};

// vLLM's --limit-mm-per-prompt: a JSON object of counts per modality; images only here.
bool parse_limit_mm(const std::string& text, int64_t* images) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  const char* what = "mxserve serve: --limit-mm-per-prompt";
  if (j.is_discarded() || !j.is_object()) {
    std::fprintf(stderr, "%s '%s' is not a JSON object such as {\"image\": 4}\n", what,
                 text.c_str());
    return false;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "image") {
      std::fprintf(stderr, "%s: modality '%s' is not served (images only)\n", what,
                   it.key().c_str());
      return false;
    }
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 1024) {
      std::fprintf(stderr, "%s: 'image' must be an integer from 0 to 1024 (got %s)\n", what,
                   it->dump().c_str());
      return false;
    }
    *images = it->get<int64_t>();
  }
  return true;
}

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

// The context served and the KV cache's size in tokens, or why memory cannot hold them. Every
// product saturates: a config's context (up to kMaxConfigSize) times a wide token, or a flag's
// count times a recurrent state, must give a clear refusal, not a wrapped size or a bad_alloc.
struct KvPlan {
  int64_t context = 0;
  int64_t tokens = 0;
};
Result<KvPlan> plan_kv_cache(const ServeArgs& a, int64_t model_context, int64_t token_bytes,
                             int64_t slot_bytes) {
  const ServerConfig& c = a.server;
  if (c.context_length > model_context) {
    return invalid_argument("--context-length " + std::to_string(c.context_length) +
                            " exceeds the model's context of " + std::to_string(model_context) +
                            " tokens (max_position_embeddings)");
  }
  const int64_t memory = static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
  const int64_t running = c.scheduler.max_running_requests;
  const int64_t state = saturating_mul(slot_bytes, running);
  const int64_t budget = memory / 4 - state;
  if (budget <= 0) {
    return invalid_argument(std::to_string(running) + " running requests need " +
                            std::to_string(state >> 20) +
                            " MiB of recurrent state, more than a quarter of memory: lower "
                            "--max-running-requests");
  }
  const int64_t tb = std::max<int64_t>(token_bytes, 1);
  KvPlan plan;
  plan.context = c.context_length > 0 ? c.context_length : model_context;
  if (a.max_total_tokens > 0) {
    if (saturating_mul(a.max_total_tokens, tb) > memory - state) {
      return invalid_argument("--max-total-tokens " + std::to_string(a.max_total_tokens) +
                              " needs " +
                              std::to_string(saturating_mul(a.max_total_tokens, tb) >> 20) +
                              " MiB of KV cache, more than this machine's " +
                              std::to_string(memory >> 20) + " MiB of memory");
    }
    plan.tokens = a.max_total_tokens;
  } else {
    // One full context may take up to half of memory; the model's own context can be far
    // beyond any machine (1M-token configs), and is then lowered to what fits.
    const int64_t one = (memory / 2 - state) / tb;
    if (plan.context > one) {
      const std::string need = std::to_string(saturating_mul(plan.context, tb) >> 20) +
                               " MiB of KV cache, more than half of memory";
      if (c.context_length > 0 || one < 1) {
        return invalid_argument("a context of " + std::to_string(plan.context) + " tokens needs " +
                                need + ": lower --context-length");
      }
      MX_LOG_WARN("the model's context of " + std::to_string(plan.context) + " tokens needs " +
                  need + ": serving " + std::to_string(one) +
                  " tokens (--context-length or --max-total-tokens choose)");
      plan.context = one;
    }
    plan.tokens = std::max<int64_t>(
        plan.context,
        std::min<int64_t>({saturating_mul(plan.context, running), 1 << 20, budget / tb}));
  }
  // A request longer than the whole cache could never run: the context says so up front (a 400
  // naming the context) rather than each such request failing in the scheduler.
  if (plan.tokens < plan.context) {
    MX_LOG_WARN("the KV cache holds " + std::to_string(plan.tokens) +
                " tokens, less than the context of " + std::to_string(plan.context) +
                ": requests are limited to " + std::to_string(plan.tokens) + " tokens");
    plan.context = plan.tokens;
  }
  return plan;
}

// --tool-call-parser auto (the default) picks the form the chat template writes calls in,
// and hermes for a template that shows none, so that a forced tool_choice works on any
// model; none leaves calls in the content.
bool resolve_output_parsers(const ChatTemplate* tmpl, ServerConfig* c) {
  if (c->reasoning_parser == "none") c->reasoning_parser.clear();
  if (c->reasoning_parser == "auto") {
    const bool thinks = tmpl && tmpl->source().find("<think>") != std::string::npos;
    c->reasoning_parser = thinks ? "qwen3" : "";
  }
  if (!c->reasoning_parser.empty()) MX_LOG_INFO("reasoning: " + c->reasoning_parser + " parser");
  if (c->tool_call_parser == "none") c->tool_call_parser.clear();
  if (c->tool_call_parser.empty()) return true;
  if (c->tool_call_parser == "auto" &&
      tool_parser_for_template(tmpl ? tmpl->source() : "").empty()) {
    c->tool_call_parser = "hermes";
  }
  auto format = resolve_tool_parser(c->tool_call_parser, tmpl ? tmpl->source() : "");
  if (!format.is_ok()) {
    std::fprintf(stderr, "mxserve serve: --tool-call-parser: %s\n",
                 format.status().message().c_str());
    return false;
  }
  c->tool_call_parser = tool_call_format_name(*format);
  MX_LOG_INFO("tool calls: " + c->tool_call_parser + " parser");
  return true;
}

// --pooling auto: what the checkpoint says (sentence-transformers' 1_Pooling/config.json),
// else the last token for Qwen3-Embedding-style models (the bare Qwen3Model, or "Embedding" in
// the name), else the mean.
Pooling resolve_pooling(const std::string& flag, const std::string& model_path) {
  if (flag == "last") return Pooling::kLast;
  if (flag == "mean") return Pooling::kMean;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir(model_path);
  if (auto st = read_text_file((dir / "1_Pooling" / "config.json").string()); st.is_ok()) {
    const Json j = Json::parse(*st, nullptr, false);
    if (j.is_object() && j.value("pooling_mode_lasttoken", false)) return Pooling::kLast;
    if (j.is_object()) return Pooling::kMean;
  }
  std::string name = dir.filename().string();
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  if (name.find("embedding") != std::string::npos) return Pooling::kLast;
  if (auto cfg = read_text_file((dir / "config.json").string()); cfg.is_ok()) {
    if (cfg->find("\"Qwen3Model\"") != std::string::npos) return Pooling::kLast;
  }
  return Pooling::kMean;
}

// Keys and values of one token of `m`'s cache, over its full-attention layers.
int64_t kv_token_bytes(const DecoderModel& m) {
  const ModelConfig& mc = m.config();
  int64_t attention_layers = 0;
  for (LayerKind k : mc.layer_kinds) attention_layers += k == LayerKind::kFullAttention ? 1 : 0;
  return static_cast<int64_t>(
      std::ceil(2.0 * static_cast<double>(attention_layers * mc.num_kv_heads * mc.head_dim) *
                kv_element_bytes(m.kv_dtype(), mc.head_dim)));
}

// Sets the context served and the KV cache's blocks from memory; false (and says why) when
// memory cannot hold them. `drafter`: the model the drafter of each request runs (an MTP head, a
// draft model), whose caches hold the same tokens as the request's blocks.
bool size_kv_cache(ServeArgs& a, const DecoderModel& model, const DecoderModel* drafter) {
  ServerConfig& c = a.server;
  const ModelConfig& mc = model.config();
  const int64_t drafter_bytes = drafter != nullptr ? kv_token_bytes(*drafter) : 0;
  const int64_t token_bytes = kv_token_bytes(model) + drafter_bytes;
  // Hybrid models hold a recurrent state per running request: it comes out of the budget.
  // Verification keeps a state per fed position too (SeqSlice::keep_states), and prefix caching
  // two saved states per running request (the engine's for_model); a hybrid draft model its
  // own state and the one saved after the confirmed tokens.
  const int64_t kept_states =
      (c.spec.algorithm != SpecAlgorithm::kNone ? c.spec.num_draft_tokens + 1 : 0) +
      (c.scheduler.prefix_caching ? 2 : 0);
  const int64_t slot_bytes =
      static_cast<int64_t>(PagedKv(mc, 0, 1, model.kv_dtype(), 1).slot_bytes()) *
          (1 + kept_states) +
      (drafter != nullptr
           ? 2 * static_cast<int64_t>(
                     PagedKv(drafter->config(), 0, 1, drafter->kv_dtype(), 1).slot_bytes())
           : 0);
  auto plan = plan_kv_cache(a, mc.max_position_embeddings, token_bytes, slot_bytes);
  if (!plan.is_ok()) {
    std::fprintf(stderr, "mxserve serve: %s\n", plan.status().message().c_str());
    return false;
  }
  c.context_length = plan->context;
  c.scheduler.num_blocks =
      static_cast<int32_t>((plan->tokens + c.scheduler.block_size - 1) / c.scheduler.block_size);
  const int64_t kv_tokens = int64_t{c.scheduler.num_blocks} * c.scheduler.block_size;
  MX_LOG_INFO("KV cache: " + std::to_string(kv_tokens) + " tokens, " +
              std::to_string(kv_tokens * token_bytes >> 20) + " MiB (" +
              kv_dtype_name(model.kv_dtype()) + ")" +
              (drafter_bytes > 0 ? ", the drafter's caches " + std::to_string(drafter_bytes) +
                                       " bytes of each token's " + std::to_string(token_bytes)
                                 : std::string()) +
              (slot_bytes > 0
                   ? "; recurrent state: " + std::to_string(c.scheduler.max_running_requests) +
                         " slots of " + std::to_string(slot_bytes >> 10) + " KiB"
                   : std::string()));
  return true;
}

int serve(ServeArgs& a) {
  if (a.server.spec.algorithm == SpecAlgorithm::kMtp && (a.m.ep_size > 1 || a.m.tp_size > 1)) {
    std::fprintf(stderr, "mxserve serve: %s\n", kNoMtpUnderEp);
    return 1;
  }
  auto model = load_model_or_report(a.m, "serve");
  if (!model) return 1;
  if (int code = 0; ep_worker_takes_over(*model, &code)) return code;
  auto tok = load_model_tokenizer(a.m.model);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "mxserve serve: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::optional<ChatTemplate> tmpl;
  // No template is fine (chat requests get a 400); one that does not parse is the
  // operator's to fix before anyone is served.
  if (auto t = load_model_chat_template(a.m.model); t.is_ok()) {
    tmpl = std::move(t).value();
  } else if (t.status().code() != StatusCode::kNotFound) {
    std::fprintf(stderr, "mxserve serve: chat template: %s\n", t.status().to_string().c_str());
    return 1;
  }
  auto stops = stop_token_ids_or_report(a.m.model, **tok, tmpl ? &*tmpl : nullptr, "serve");
  if (!stops) return 1;
  auto drafter = drafter_or_report(a.m, *model, a.server.spec, "serve");
  if (!drafter) return 1;
  bool tower_failed = false;
  auto tower = vision_tower_or_report(a.m, *model, "serve", &tower_failed);
  if (tower_failed) return 1;
  if (tower) {
    auto pre = read_preprocessor_config(a.m.model);
    if (!pre.is_ok()) {
      std::fprintf(stderr, "mxserve serve: %s\n", pre.status().to_string().c_str());
      return 1;
    }
    a.server.images.tower = tower.get();
    a.server.images.preprocess = *pre;
    MX_LOG_INFO("images: vision tower of " + std::to_string(tower->config().depth) +
                " blocks; at most " + std::to_string(a.server.images.max_images) +
                " images per request of at most " +
                std::to_string(a.server.images.limits.max_pixels) + " pixels");
  }
  a.server.draft_model = drafter->head.get();
  ServerConfig& c = a.server;
  if (c.served_model_name.empty()) {
    // A directory's name, or a GGUF file's name without ".gguf" (llama.cpp's alias).
    std::filesystem::path p(a.m.model);
    c.served_model_name = (p.extension() == ".gguf" ? p.stem() : p.filename()).string();
    if (c.served_model_name.empty()) c.served_model_name = "model";
  }
  if (!size_kv_cache(a, *model, drafter->head.get())) return 1;
  if (!resolve_output_parsers(tmpl ? &*tmpl : nullptr, &c)) return 1;
  c.pooling = resolve_pooling(a.pooling, a.m.model);
  MX_LOG_INFO(std::string("embeddings: ") + pooling_name(c.pooling) + " pooling");
  OpenAiServer server(*model, *tok, std::move(tmpl), std::move(*stops), c);
  // SIGINT and SIGTERM begin the server's graceful shutdown (its own signal handling).
  const Status s = server.run();
  if (!s.is_ok()) {
    std::fprintf(stderr, "mxserve serve: %s\n", s.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

void register_serve(CLI::App& app, int& exit_code) {
  auto a = std::make_shared<ServeArgs>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_model_flags(cmd, &a->m);
  ServerConfig& c = a->server;
  cmd->add_option("--host", c.host, "Address to bind (loopback by default)")->capture_default_str();
  cmd->add_option("--port", c.port, "Port (0 picks a free one)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--served-model-name", c.served_model_name,
                  "Model id in the API (default: directory name)");
  cmd->add_option("--api-key", c.api_key, "Require this bearer token");
  // Bounds far above any real deployment, below where a count would overflow a product (blocks
  // are int32, slots are allocated per running request).
  add_speculative_flags(cmd, &c.spec);
  cmd->add_option("--max-running-requests", c.scheduler.max_running_requests,
                  "Requests decoded together")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--max-total-tokens", a->max_total_tokens, "KV cache size in tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 34));
  cmd->add_option("--chunked-prefill-size", c.scheduler.chunked_prefill_size,
                  "Prefill tokens per step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  // SGLang's flag, and vLLM's names for the same switch (on by default).
  cmd->add_flag("!--disable-radix-cache,!--no-enable-prefix-caching,--enable-prefix-caching",
                c.scheduler.prefix_caching,
                "Recompute every prompt instead of reusing the KV blocks of cached prefixes");
  cmd->add_option("--max-queued-requests", c.scheduler.max_waiting_requests,
                  "Waiting requests before 503")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--context-length", c.context_length, "Context length (default: the model's)")
      ->check(CLI::Range(int64_t{1}, kMaxConfigSize));
  cmd->add_option("--max-body-bytes", c.max_body_bytes, "Largest request body (413 above)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--max-connections", c.max_connections,
                  "Open connections before new ones get 503")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--timeout-keep-alive", c.keep_alive_timeout_s,
                  "Seconds an idle kept-alive connection stays open")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", c.shutdown_timeout_s,
                  "Seconds running requests get to finish after SIGINT/SIGTERM")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->add_option("--log-stats-interval", c.stats_interval_s,
                  "Seconds between throughput and queue lines in the log (0: none)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  c.tool_call_parser = "auto";
  cmd->add_option("--tool-call-parser", c.tool_call_parser,
                  "Tool-call format of replies: auto (the chat template's; hermes when it shows "
                  "none), hermes (Qwen3), qwen3_coder (Qwen3.5), or none (calls stay text)")
      ->check(CLI::IsMember({"hermes", "qwen3_coder", "auto", "none"}))
      ->capture_default_str();
  // vLLM requires this beside --tool-call-parser; here the parser alone turns tool calls on.
  cmd->add_flag("--enable-auto-tool-choice", a->auto_tool_choice,
                "Accepted for vLLM compatibility");
  c.reasoning_parser = "auto";
  cmd->add_option("--reasoning-parser", c.reasoning_parser,
                  "Split <think> blocks into reasoning_content: auto (qwen3 when the chat "
                  "template writes <think>), qwen3, or none")
      ->check(CLI::IsMember({"qwen3", "auto", "none"}))
      ->capture_default_str();
  cmd->add_option("--pooling", a->pooling,
                  "Pooling of /v1/embeddings: auto (the checkpoint's; last token for "
                  "Qwen3-Embedding), last, or mean")
      ->check(CLI::IsMember({"auto", "last", "mean"}))
      ->capture_default_str();
  cmd->add_flag("!--no-webui", c.web_ui, "Serve no chat page at / (it is 404 then)");
  cmd->add_option("--limit-mm-per-prompt", a->limit_mm,
                  "Images per request on a vision model, as vLLM's JSON ('{\"image\": 16}')");
  cmd->add_flag("!--no-image-urls", c.images.fetch_urls,
                "Refuse http(s) image URLs (data: URIs only)");
  cmd->add_option("--image-url-timeout", c.images.fetch_timeout_s,
                  "Seconds an image URL may take to fetch")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--image-url-max-bytes", c.images.fetch_max_bytes,
                  "Largest image fetched from a URL, in bytes")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32))
      ->capture_default_str();
  cmd->add_option("--max-image-pixels", c.images.limits.max_pixels,
                  "Largest image decoded, in pixels (a larger one is a 400)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  cmd->callback([a, &exit_code] {
    if (!a->limit_mm.empty() && !parse_limit_mm(a->limit_mm, &a->server.images.max_images)) {
      exit_code = 1;
      return;
    }
    exit_code = serve(*a);
  });
}

}  // namespace mx::app
