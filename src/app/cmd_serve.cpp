#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "app/commands.h"
#include "core/log.h"
#include "loader/model_text.h"
#include "runtime/generate.h"
#include "server/openai_server.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mx::app {
namespace {

struct ServeArgs {
  ModelArgs m;
  ServerConfig server;
  // 0: room for max_running_requests full contexts, capped at 1M tokens and at a quarter of
  // physical memory.
  int64_t max_total_tokens = 0;
};

OpenAiServer* g_server = nullptr;

int serve(ServeArgs& a) {
  auto model = load_model_or_report(a.m, "serve");
  if (!model) return 1;
  if (int code = 0; ep_worker_takes_over(*model, &code)) return code;
  auto tok = load_model_tokenizer(a.m.model);
  if (!tok.is_ok()) {
    std::fprintf(stderr, "mxserve serve: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::optional<ChatTemplate> tmpl;
  if (auto t = load_model_chat_template(a.m.model); t.is_ok()) tmpl = std::move(t).value();
  std::vector<int32_t> stops = default_stop_token_ids(a.m.model, model->config());
  for (const char* s : {"<|im_end|>", "<|endoftext|>"}) {
    if (auto id = (*tok)->token_id(s)) stops.push_back(*id);
  }
  ServerConfig& c = a.server;
  if (c.served_model_name.empty()) {
    // A directory's name, or a GGUF file's name without ".gguf" (llama.cpp's alias).
    std::filesystem::path p(a.m.model);
    c.served_model_name = (p.extension() == ".gguf" ? p.stem() : p.filename()).string();
    if (c.served_model_name.empty()) c.served_model_name = "model";
  }
  const int64_t ctx =
      c.context_length > 0 ? c.context_length : model->config().max_position_embeddings;
  const ModelConfig& mc = model->config();
  int64_t attention_layers = 0;
  for (LayerKind k : mc.layer_kinds) attention_layers += k == LayerKind::kFullAttention ? 1 : 0;
  const int64_t token_bytes = 2 * attention_layers * mc.num_kv_heads * mc.head_dim *
                              (model->kv_dtype() == KvDtype::kBF16 ? 2 : 4);
  // Hybrid models hold a recurrent state per running request: it comes out of the budget.
  const int64_t slot_bytes =
      static_cast<int64_t>(PagedKv(mc, 0, 1, model->kv_dtype(), 1).slot_bytes());
  const int64_t budget =
      static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE) / 4 -
      slot_bytes * c.scheduler.max_running_requests;
  if (budget <= 0) {
    std::fprintf(stderr,
                 "mxserve serve: %d running requests need %lld MiB of recurrent state, more than "
                 "a quarter of memory: lower --max-running-requests\n",
                 c.scheduler.max_running_requests,
                 static_cast<long long>(slot_bytes * c.scheduler.max_running_requests >> 20));
    return 1;
  }
  const int64_t total =
      a.max_total_tokens > 0
          ? a.max_total_tokens
          : std::max<int64_t>(ctx,
                              std::min<int64_t>({ctx * c.scheduler.max_running_requests, 1 << 20,
                                                 budget / std::max<int64_t>(token_bytes, 1)}));
  c.scheduler.num_blocks =
      static_cast<int32_t>((total + c.scheduler.block_size - 1) / c.scheduler.block_size);
  const int64_t kv_tokens = int64_t{c.scheduler.num_blocks} * c.scheduler.block_size;
  MX_LOG_INFO("KV cache: " + std::to_string(kv_tokens) + " tokens, " +
              std::to_string(kv_tokens * token_bytes >> 20) + " MiB (" +
              kv_dtype_name(model->kv_dtype()) + ")" +
              (slot_bytes > 0
                   ? "; recurrent state: " + std::to_string(c.scheduler.max_running_requests) +
                         " slots of " + std::to_string(slot_bytes >> 10) + " KiB"
                   : std::string()));
  OpenAiServer server(*model, *tok, std::move(tmpl), stops, c);
  g_server = &server;
  std::signal(SIGINT, [](int) {
    if (g_server) g_server->stop();
  });
  std::signal(SIGTERM, [](int) {
    if (g_server) g_server->stop();
  });
  const Status s = server.run();
  g_server = nullptr;
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
  cmd->add_option("--port", c.port, "Port (0 picks a free one)")->capture_default_str();
  cmd->add_option("--served-model-name", c.served_model_name,
                  "Model id in the API (default: directory name)");
  cmd->add_option("--api-key", c.api_key, "Require this bearer token");
  cmd->add_option("--max-running-requests", c.scheduler.max_running_requests,
                  "Requests decoded together")
      ->capture_default_str();
  cmd->add_option("--max-total-tokens", a->max_total_tokens, "KV cache size in tokens");
  cmd->add_option("--chunked-prefill-size", c.scheduler.chunked_prefill_size,
                  "Prefill tokens per step")
      ->capture_default_str();
  cmd->add_option("--max-queued-requests", c.scheduler.max_waiting_requests,
                  "Waiting requests before 503")
      ->capture_default_str();
  cmd->add_option("--context-length", c.context_length, "Context length (default: the model's)");
  cmd->add_option("--max-body-bytes", c.max_body_bytes, "Largest request body (413 above)")
      ->capture_default_str();
  cmd->callback([a, &exit_code] { exit_code = serve(*a); });
}

}  // namespace mx::app
