#include "server/openai_server.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <mutex>
#include <set>

#include "core/json_util.h"
#include "core/log.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"

namespace mx {
namespace {

using Clock = std::chrono::steady_clock;

HttpReply json_reply(const OJson& j, int status = 200) {
  return {status, "application/json", j.dump()};
}
HttpReply error_reply(const HttpError& e) { return {e.status, "application/json", error_body(e)}; }

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}
std::string seconds_text(Clock::time_point since) {
  return seconds_text(std::chrono::duration<double>(Clock::now() - since).count());
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

// One generation request, from the engine's events to the client. The events arrive on the
// engine thread; until the request is admitted they wait in `early`.
struct Generation {
  std::mutex mu;
  std::shared_ptr<HttpExchange> ex;
  std::string rid, name, object, path;
  bool chat = false, stream = false, include_usage = false, want_logprobs = false;
  bool ready = false, sent_role = false, done = false;
  int64_t created = 0;
  uint64_t engine_id = 0;
  Clock::time_point start;
  std::deque<StreamEvent> early;
  std::unique_ptr<LogprobsJson> lps;
  std::string text;  // a whole reply's text so far
};

}  // namespace

struct OpenAiServer::Impl {
  DecoderModel& model;
  std::shared_ptr<const Tokenizer> tok;
  std::optional<ChatTemplate> tmpl;
  std::vector<int32_t> stop_ids;
  ServerConfig config;
  // The HTTP server outlives the engine: the engine's requests hold exchanges, which hold
  // connections of the HTTP server.
  std::unique_ptr<HttpServer> http;
  std::unique_ptr<Engine> engine;
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> shutting_down{false};
  std::atomic<int> signals_seen{0};
  std::mutex live_mu;
  std::set<uint64_t> live;  // engine ids of running generations, for the shutdown
  EngineStats last_stats;
  Clock::time_point last_stats_time = Clock::now();

  Impl(DecoderModel& m, std::shared_ptr<const Tokenizer> t, std::optional<ChatTemplate> c,
       std::vector<int32_t> s, const ServerConfig& cfg)
      : model(m), tok(std::move(t)), tmpl(std::move(c)), stop_ids(std::move(s)), config(cfg) {
    HttpServerConfig hc;
    hc.host = config.host;
    hc.port = config.port;
    hc.body_limit = config.max_body_bytes;
    hc.max_connections = config.max_connections;
    hc.idle_timeout = millis(config.keep_alive_timeout_s);
    HttpHandler h;
    h.check_head = [this](const HttpHead& head) { return check_head(head); };
    h.handle = [this](const HttpHead& head, std::string body, std::shared_ptr<HttpExchange> ex) {
      handle(head, std::move(body), std::move(ex));
    };
    http = std::make_unique<HttpServer>(hc, std::move(h));
    engine = std::make_unique<Engine>(model, *tok, config.scheduler);
  }
  ~Impl() { engine.reset(); }

  int64_t context() const {
    const int64_t ctx = model.config().max_position_embeddings;
    return config.context_length > 0 ? std::min(config.context_length, ctx) : ctx;
  }

  ProtocolContext protocol() const {
    ProtocolContext c;
    c.tok = tok.get();
    c.tmpl = tmpl ? &*tmpl : nullptr;
    c.stop_ids = stop_ids;
    c.context = context();
    c.served_model_name = config.served_model_name;
    return c;
  }

  std::optional<HttpReply> check_head(const HttpHead& h) const {
    if (config.api_key.empty() || h.path.rfind("/v1/", 0) != 0) return std::nullopt;
    if (h.header("authorization") == "Bearer " + config.api_key) return std::nullopt;
    return error_reply({401, "Incorrect or missing API key", "authentication_error"});
  }

  void handle(const HttpHead& h, std::string body, std::shared_ptr<HttpExchange> ex) {
    struct Route {
      const char* path;
      const char* method;
    };
    static const Route kRoutes[] = {{"/health", "GET"},
                                    {"/metrics", "GET"},
                                    {"/v1/models", "GET"},
                                    {"/v1/completions", "POST"},
                                    {"/v1/chat/completions", "POST"}};
    const Route* route = nullptr;
    for (const Route& r : kRoutes) route = h.path == r.path ? &r : route;
    if (!route) return ex->send(error_reply({404, "no such endpoint: " + h.path}));
    if (h.method != route->method) {
      return ex->send(error_reply(
          {405, "method " + h.method + " is not allowed on " + h.path + "; use " + route->method}));
    }
    if (h.path == "/health") return ex->send({200, "text/plain", "ok"});
    if (h.path == "/metrics") return ex->send({200, "text/plain; version=0.0.4", metrics()});
    if (h.path == "/v1/models") return ex->send(json_reply(models()));
    generate(h, body, std::move(ex), h.path == "/v1/chat/completions");
  }

  OJson models() const {
    OJson m = {{"id", config.served_model_name},
               {"object", "model"},
               {"created", now_seconds()},
               {"owned_by", "mxserve"},
               {"max_model_len", context()}};
    return {{"object", "list"}, {"data", OJson::array({m})}};
  }

  void log_request(const Generation& g, int status, int64_t prompt, int64_t completion,
                   const std::string& outcome) {
    MX_LOG_INFO("request " + g.rid + " " + g.path + ": " + std::to_string(status) + ", " +
                std::to_string(prompt) + " prompt + " + std::to_string(completion) +
                " completion tokens, " + seconds_text(g.start) + ", " + outcome);
  }

  void fail(Generation& g, const HttpError& e) {
    log_request(g, e.status, 0, 0, e.message);
    g.ex->send(error_reply(e));
  }

  void generate(const HttpHead& h, const std::string& text, std::shared_ptr<HttpExchange> ex,
                bool chat) {
    auto g = std::make_shared<Generation>();
    g->start = Clock::now();
    g->ex = std::move(ex);
    g->chat = chat;
    g->path = h.path;
    g->rid = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    g->name = config.served_model_name;
    g->created = now_seconds();
    g->object = chat ? "chat.completion" : "text_completion";
    g->lps = std::make_unique<LogprobsJson>(*tok, chat);
    // The body is JSON whatever its Content-Type, as vLLM and SGLang read it (curl -d sends
    // application/x-www-form-urlencoded).
    if (json_nests_deeper_than(text, kMaxJsonDepth)) {
      return fail(*g, {400, "the request body nests JSON deeper than " +
                                std::to_string(kMaxJsonDepth) + " levels"});
    }
    OJson body = OJson::parse(text, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      return fail(*g, {400, "the request body is not a JSON object"});
    }
    ParsedRequest pr;
    HttpError err{400, ""};
    if (!parse_request(body, chat, protocol(), &pr, &err)) return fail(*g, err);
    g->stream = pr.stream;
    g->include_usage = pr.include_usage;
    g->want_logprobs = pr.top_logprobs >= 0;
    EngineRequest er;
    er.prompt = std::move(pr.prompt);
    er.params = std::move(pr.params);
    er.top_logprobs = pr.top_logprobs;
    er.on_event = [this, g](const StreamEvent& e) {
      std::lock_guard<std::mutex> lock(g->mu);
      if (!g->ready) return g->early.push_back(e);
      on_event(*g, e);
    };
    auto id = engine->submit(std::move(er));
    if (!id.is_ok()) {
      const bool full = id.status().code() == StatusCode::kOutOfRange;
      return fail(*g, {full ? 503 : 400, id.status().message(),
                       full ? "server_busy" : "invalid_request_error"});
    }
    {
      std::lock_guard<std::mutex> lock(live_mu);
      live.insert(*id);
    }
    std::lock_guard<std::mutex> lock(g->mu);
    g->engine_id = *id;
    g->ready = true;
    if (g->stream) g->ex->start_stream(200, "text/event-stream");
    for (const StreamEvent& e : g->early) on_event(*g, e);
    g->early.clear();
    Engine* eng = engine.get();
    const uint64_t eid = *id;
    g->ex->on_disconnect([eng, eid] { eng->cancel(eid); });
  }

  OJson chunk_json(Generation& g, const std::string& text, const OJson& reason,
                   const std::vector<TokenLogprob>& lps) {
    OJson choice = {{"index", 0},
                    {"finish_reason", reason},
                    {"logprobs", g.want_logprobs && !lps.empty() ? g.lps->add(lps) : OJson()}};
    if (g.chat) {
      OJson delta = OJson::object();
      if (!g.sent_role) delta["role"] = "assistant";
      delta["content"] = text;
      choice["delta"] = delta;
    } else {
      choice["text"] = text;
    }
    g.sent_role = true;
    OJson j = {{"id", g.rid},
               {"object", g.chat ? "chat.completion.chunk" : "text_completion"},
               {"created", g.created},
               {"model", g.name},
               {"choices", OJson::array({choice})}};
    if (g.include_usage) j["usage"] = nullptr;
    return j;
  }

  static OJson usage(const StreamEvent& e) {
    return {{"prompt_tokens", e.prompt_tokens},
            {"completion_tokens", e.completion_tokens},
            {"total_tokens", e.prompt_tokens + e.completion_tokens}};
  }

  // Under g.mu, on the engine thread or (for events that came before admission) the handler's.
  void on_event(Generation& g, const StreamEvent& e) {
    if (g.done) return;
    const bool has_lp = g.want_logprobs && !e.logprobs.empty();
    if (g.stream && !e.finished) {
      if (!e.text.empty() || has_lp) g.ex->write(sse(chunk_json(g, e.text, nullptr, e.logprobs)));
      return;
    }
    if (!e.finished) {
      g.text += e.text;
      if (has_lp) g.lps->add(e.logprobs);
      return;
    }
    g.done = true;
    {
      std::lock_guard<std::mutex> lock(live_mu);
      live.erase(g.engine_id);
    }
    const bool cut_short = e.finish_reason == "cancelled" && shutting_down.load();
    if (g.stream) return end_stream(g, e, cut_short);
    if (cut_short) {
      return fail(g, {503, "the server shut down before the request finished", "server_error"});
    }
    if (e.finish_reason == "cancelled") {
      return log_request(g, 499, e.prompt_tokens, e.completion_tokens, "client went away");
    }
    g.text += e.text;
    if (has_lp) g.lps->add(e.logprobs);
    OJson choice = {{"index", 0}, {"finish_reason", e.finish_reason}};
    if (g.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", g.text}};
    } else {
      choice["text"] = g.text;
    }
    choice["logprobs"] = g.want_logprobs ? g.lps->all() : OJson();
    OJson out = {{"id", g.rid},
                 {"object", g.object},
                 {"created", g.created},
                 {"model", g.name},
                 {"choices", OJson::array({choice})},
                 {"usage", usage(e)}};
    g.ex->send(json_reply(out));
    log_request(g, 200, e.prompt_tokens, e.completion_tokens, "finish " + e.finish_reason);
  }

  static std::string sse(const OJson& j) { return "data: " + j.dump() + "\n\n"; }

  void end_stream(Generation& g, const StreamEvent& e, bool cut_short) {
    if (cut_short) {
      // The stream's last event says why it ended, as vLLM's error events do.
      const HttpError err{503, "the server shut down before the request finished", "server_error"};
      g.ex->write("data: " + error_body(err) + "\n\n");
      g.ex->write("data: [DONE]\n\n");
      g.ex->end();
      return log_request(g, 503, e.prompt_tokens, e.completion_tokens, "cut short by shutdown");
    }
    if (e.finish_reason == "cancelled") {
      return log_request(g, 499, e.prompt_tokens, e.completion_tokens, "client went away");
    }
    g.ex->write(sse(chunk_json(g, e.text, e.finish_reason, e.logprobs)));
    if (g.include_usage) {
      g.ex->write(sse({{"id", g.rid},
                       {"object", g.chat ? "chat.completion.chunk" : "text_completion"},
                       {"created", g.created},
                       {"model", g.name},
                       {"choices", OJson::array()},
                       {"usage", usage(e)}}));
    }
    g.ex->write("data: [DONE]\n\n");
    g.ex->end();
    log_request(g, 200, e.prompt_tokens, e.completion_tokens, "finish " + e.finish_reason);
  }

  std::string metrics() const {
    const EngineStats s = engine->stats();
    std::string out;
    auto gauge = [&out](const char* name, const char* help, const char* type, double v) {
      out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" +
             name + " " + std::to_string(v) + "\n";
    };
    gauge("mxserve_num_requests_running", "Requests in the running batch.", "gauge",
          static_cast<double>(s.running));
    gauge("mxserve_num_requests_waiting", "Requests waiting for admission.", "gauge",
          static_cast<double>(s.waiting));
    gauge("mxserve_prompt_tokens_total", "Prompt tokens admitted.", "counter",
          static_cast<double>(s.prompt_tokens));
    gauge("mxserve_generation_tokens_total", "Tokens generated.", "counter",
          static_cast<double>(s.generated_tokens));
    gauge("mxserve_kv_cache_blocks_used", "KV cache blocks in use.", "gauge",
          static_cast<double>(s.kv_blocks_used));
    gauge("mxserve_kv_cache_usage_ratio", "Fraction of KV cache blocks in use.", "gauge",
          s.kv_blocks_total
              ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total)
              : 0.0);
    gauge("mxserve_requests_finished_total", "Requests finished.", "counter",
          static_cast<double>(s.finished_requests));
    gauge("mxserve_preemptions_total", "Requests preempted for KV space.", "counter",
          static_cast<double>(s.preemptions));
    gauge("mxserve_http_connections", "Open HTTP connections.", "gauge",
          static_cast<double>(http->open_connections()));
    out += s.time_to_first_token.exposition("mxserve_time_to_first_token_seconds",
                                            "Time from arrival to the first generated token.");
    out += s.inter_token_latency.exposition("mxserve_inter_token_latency_seconds",
                                            "Time between consecutive generated tokens.");
    out += s.e2e_latency.exposition("mxserve_e2e_request_latency_seconds",
                                    "Time from arrival to the last token of finished requests.");
    return out;
  }

  // SGLang-style periodic lines: throughput since the last line, the batch and the queue.
  void log_stats() {
    const EngineStats s = engine->stats();
    const auto now = Clock::now();
    const double dt = std::chrono::duration<double>(now - last_stats_time).count();
    const int64_t prompt = s.prompt_tokens - last_stats.prompt_tokens;
    const int64_t gen = s.generated_tokens - last_stats.generated_tokens;
    last_stats = s;
    last_stats_time = now;
    if (prompt == 0 && gen == 0 && s.running == 0 && s.waiting == 0) return;
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "stats: prompt %.1f tok/s, generation %.1f tok/s, running %lld, queued %lld, "
                  "KV %.1f%% of %lld blocks, %lld connections",
                  dt > 0 ? static_cast<double>(prompt) / dt : 0.0,
                  dt > 0 ? static_cast<double>(gen) / dt : 0.0, static_cast<long long>(s.running),
                  static_cast<long long>(s.waiting),
                  s.kv_blocks_total ? 100.0 * static_cast<double>(s.kv_blocks_used) /
                                          static_cast<double>(s.kv_blocks_total)
                                    : 0.0,
                  static_cast<long long>(s.kv_blocks_total),
                  static_cast<long long>(http->open_connections()));
    MX_LOG_INFO(buf);
  }

  void begin_shutdown() {
    if (shutting_down.exchange(true)) return;
    MX_LOG_INFO("shutdown: no longer accepting; " + std::to_string(http->running_exchanges()) +
                " requests running, " + seconds_text(config.shutdown_timeout_s) + " to finish");
    http->shutdown(millis(config.shutdown_timeout_s), [this] {
      std::vector<uint64_t> ids;
      {
        std::lock_guard<std::mutex> lock(live_mu);
        ids.assign(live.begin(), live.end());
      }
      MX_LOG_WARN("shutdown: timeout; ending " + std::to_string(ids.size()) +
                  " running requests with an error");
      for (uint64_t id : ids) engine->cancel(id);
    });
  }
};

OpenAiServer::OpenAiServer(DecoderModel& model, std::shared_ptr<const Tokenizer> tok,
                           std::optional<ChatTemplate> tmpl, std::vector<int32_t> stop_ids,
                           const ServerConfig& config)
    : impl_(std::make_unique<Impl>(model, std::move(tok), std::move(tmpl), std::move(stop_ids),
                                   config)) {}

OpenAiServer::~OpenAiServer() = default;

Status OpenAiServer::run() {
  Impl& m = *impl_;
  MX_RETURN_IF_ERROR(m.http->listen());
  bound_port_ = m.http->port();
  const ServerConfig& c = m.config;
  MX_LOG_INFO("serving " + c.served_model_name + " on http://" + c.host + ":" +
              std::to_string(bound_port_));
  if (c.stats_interval_s > 0) m.http->every(millis(c.stats_interval_s), [&m] { m.log_stats(); });
  m.http->run([&m](int sig) {
    if (m.signals_seen++ == 0) {
      MX_LOG_INFO(std::string("shutdown: ") + (sig == SIGINT ? "SIGINT" : "SIGTERM"));
      m.begin_shutdown();
    } else {
      MX_LOG_WARN("shutdown: second signal; stopping now");
      m.http->stop();
    }
  });
  MX_LOG_INFO("shutdown: done");
  return Status::ok();
}

void OpenAiServer::shutdown() { impl_->begin_shutdown(); }

void OpenAiServer::stop() { impl_->http->stop(); }

}  // namespace mx
