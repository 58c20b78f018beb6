// The OpenAI-compatible HTTP front end: parses and validates requests, renders chat
// templates, hands work to the engine and streams it back (server-sent events). Every error is
// an OpenAI-shaped error object with its HTTP status; no request can take the server down.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "model/model.h"
#include "runtime/embed.h"
#include "runtime/engine.h"
#include "server/image_inputs.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace mx {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 30000;
  std::string served_model_name;  // default: the model directory's name
  std::string api_key;            // empty: no authentication
  int64_t context_length = 0;     // 0: the model's
  size_t max_body_bytes = 8u << 20;
  int max_connections = 2048;        // more are answered 503
  double keep_alive_timeout_s = 30;  // an idle kept-alive connection is closed after this
  double shutdown_timeout_s = 30;    // running requests' time to finish after SIGTERM
  double stats_interval_s = 10;      // throughput and queue lines in the log; 0: none
  std::string tool_call_parser;      // hermes or qwen3_coder; empty: tool calls stay text
  std::string reasoning_parser;      // qwen3; empty: reasoning stays in the content
  bool web_ui = true;                // the chat page at /
  Pooling pooling = Pooling::kMean;  // /v1/embeddings
  SchedulerConfig scheduler;
  SpeculativeOptions spec;
  // The model spec.algorithm's drafter runs: the checkpoint's MTP head (mtp), or the draft
  // model (draft).
  DecoderModel* draft_model = nullptr;
  ImageServing images;  // a vision model's tower and image limits
};

class OpenAiServer {
 public:
  OpenAiServer(DecoderModel& model, std::shared_ptr<const Tokenizer> tok,
               std::optional<ChatTemplate> tmpl, std::vector<int32_t> stop_ids,
               const ServerConfig& config);
  ~OpenAiServer();
  // Binds and serves until a signal's graceful shutdown or stop(); fails when the address
  // cannot be bound, naming it and the reason.
  Status run();
  // The graceful shutdown that SIGINT and SIGTERM begin.
  void shutdown();
  void stop();
  int bound_port() const { return bound_port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int bound_port_ = 0;
};

}  // namespace mx
