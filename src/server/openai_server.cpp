#include "server/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>

#include "core/log.h"
#include "server/openai_protocol.h"

namespace mx {
namespace {

void send_error(httplib::Response& res, const HttpError& e) {
  res.status = e.status;
  res.set_content(error_body(e), "application/json");
}

// Events of one request, handed from the engine thread to the HTTP thread.
struct RequestState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<StreamEvent> events;
  bool done = false;
};

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct OpenAiServer::Impl {
  DecoderModel& model;
  std::shared_ptr<const Tokenizer> tok;
  std::optional<ChatTemplate> tmpl;
  std::vector<int32_t> stop_ids;
  ServerConfig config;
  std::unique_ptr<Engine> engine;
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};
  std::atomic<int64_t> requests_total{0}, requests_failed{0};

  Impl(DecoderModel& m, std::shared_ptr<const Tokenizer> t, std::optional<ChatTemplate> c,
       std::vector<int32_t> s, const ServerConfig& cfg)
      : model(m), tok(std::move(t)), tmpl(std::move(c)), stop_ids(std::move(s)), config(cfg) {
    engine = std::make_unique<Engine>(model, *tok, config.scheduler);
  }

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

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + config.api_key) return true;
    send_error(res, {401, "Incorrect or missing API key", "authentication_error"});
    return false;
  }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    ++requests_total;
    if (!authorized(req, res)) return;
    OJson body = OJson::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      send_error(res, {400, "the request body is not a JSON object", "invalid_request_error"});
      return;
    }
    ParsedRequest pr;
    HttpError err{400, ""};
    if (!parse_request(body, chat, protocol(), &pr, &err)) return send_error(res, err);
    const bool stream = pr.stream, include_usage = pr.include_usage;
    auto state = std::make_shared<RequestState>();
    EngineRequest er;
    er.prompt = std::move(pr.prompt);
    er.params = std::move(pr.params);
    er.top_logprobs = pr.top_logprobs;
    const bool want_logprobs = pr.top_logprobs >= 0;
    er.on_event = [state](const StreamEvent& e) {
      std::lock_guard<std::mutex> lock(state->mu);
      state->events.push_back(e);
      if (e.finished) state->done = true;
      state->cv.notify_all();
    };
    auto id = engine->submit(std::move(er));
    if (!id.is_ok()) {
      const bool full = id.status().code() == StatusCode::kOutOfRange;
      return send_error(res, {full ? 503 : 400, id.status().message(),
                              full ? "server_busy" : "invalid_request_error"});
    }
    const std::string rid = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = now_seconds();
    const std::string object = chat ? "chat.completion" : "text_completion";
    const std::string name = config.served_model_name;
    if (!stream) {
      std::unique_lock<std::mutex> lock(state->mu);
      state->cv.wait(lock, [&] { return state->done; });
      std::string text, reason;
      int64_t pt = 0, ct = 0;
      LogprobsJson lps(*tok, chat);
      for (const StreamEvent& e : state->events) {
        text += e.text;
        if (want_logprobs) lps.add(e.logprobs);
        if (e.finished) {
          reason = e.finish_reason;
          pt = e.prompt_tokens;
          ct = e.completion_tokens;
        }
      }
      OJson choice = {{"index", 0}, {"finish_reason", reason}};
      if (chat)
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      else
        choice["text"] = text;
      choice["logprobs"] = want_logprobs ? lps.all() : OJson();
      OJson out = {
          {"id", rid},
          {"object", object},
          {"created", created},
          {"model", name},
          {"choices", OJson::array({choice})},
          {"usage", {{"prompt_tokens", pt}, {"completion_tokens", ct}, {"total_tokens", pt + ct}}}};
      res.set_content(out.dump(), "application/json");
      return;
    }
    const uint64_t engine_id = *id;
    Engine* eng = engine.get();
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    auto sent_role = std::make_shared<bool>(false);
    auto lps = std::make_shared<LogprobsJson>(*tok, chat);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=](size_t, httplib::DataSink& sink) {
          std::deque<StreamEvent> batch;
          {
            std::unique_lock<std::mutex> lock(state->mu);
            state->cv.wait_for(lock, std::chrono::milliseconds(200),
                               [&] { return !state->events.empty(); });
            batch.swap(state->events);
          }
          auto send = [&](const OJson& j) {
            const std::string line = "data: " + j.dump() + "\n\n";
            return sink.write(line.data(), line.size());
          };
          auto chunk = [&](const StreamEvent& e, const OJson& reason) {
            const std::string& text = e.text;
            OJson choice = {{"index", 0},
                            {"finish_reason", reason},
                            {"logprobs", want_logprobs && !e.logprobs.empty() ? lps->add(e.logprobs)
                                                                              : OJson()}};
            if (chat) {
              OJson delta = OJson::object();
              if (!*sent_role) delta["role"] = "assistant";
              delta["content"] = text;
              choice["delta"] = delta;
            } else {
              choice["text"] = text;
            }
            *sent_role = true;
            OJson j = {{"id", rid},
                       {"object", chunk_object},
                       {"created", created},
                       {"model", name},
                       {"choices", OJson::array({choice})}};
            if (include_usage) j["usage"] = nullptr;
            return send(j);
          };
          if (!sink.is_writable()) {
            eng->cancel(engine_id);
            return false;
          }
          for (const StreamEvent& e : batch) {
            if (!e.finished) {
              const bool has_lp = want_logprobs && !e.logprobs.empty();
              if ((!e.text.empty() || has_lp) && !chunk(e, nullptr)) {
                eng->cancel(engine_id);  // the client went away
                return false;
              }
              continue;
            }
            if (!chunk(e, e.finish_reason)) return false;
            if (include_usage) {
              OJson u = {{"id", rid},
                         {"object", chunk_object},
                         {"created", created},
                         {"model", name},
                         {"choices", OJson::array()},
                         {"usage",
                          {{"prompt_tokens", e.prompt_tokens},
                           {"completion_tokens", e.completion_tokens},
                           {"total_tokens", e.prompt_tokens + e.completion_tokens}}}};
              if (!send(u)) return false;
            }
            const std::string done = "data: [DONE]\n\n";
            sink.write(done.data(), done.size());
            sink.done();
            return true;
          }
          return true;
        },
        [=](bool success) {
          if (!success) eng->cancel(engine_id);
        });
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
    out += s.time_to_first_token.exposition("mxserve_time_to_first_token_seconds",
                                            "Time from arrival to the first generated token.");
    out += s.inter_token_latency.exposition("mxserve_inter_token_latency_seconds",
                                            "Time between consecutive generated tokens.");
    out += s.e2e_latency.exposition("mxserve_e2e_request_latency_seconds",
                                    "Time from arrival to the last token of finished requests.");
    return out;
  }
};

OpenAiServer::OpenAiServer(DecoderModel& model, std::shared_ptr<const Tokenizer> tok,
                           std::optional<ChatTemplate> tmpl, std::vector<int32_t> stop_ids,
                           const ServerConfig& config)
    : impl_(std::make_unique<Impl>(model, std::move(tok), std::move(tmpl), std::move(stop_ids),
                                   config)) {
  httplib::Server& s = impl_->http;
  Impl* im = impl_.get();
  s.new_task_queue = [] { return new httplib::ThreadPool(64); };
  s.set_tcp_nodelay(true);
  s.set_keep_alive_max_count(1000);
  s.set_payload_max_length(config.max_body_bytes);
  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string msg = res.status == 413   ? "the request body is too large"
                            : res.status == 404 ? "no such endpoint"
                                                : "request failed";
    send_error(res, {res.status, msg, "invalid_request_error"});
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, {500, "internal error", "server_error"});
  });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok", "text/plain");
  });
  s.Get("/metrics", [im](const httplib::Request&, httplib::Response& res) {
    res.set_content(im->metrics(), "text/plain; version=0.0.4");
  });
  s.Get("/v1/models", [im](const httplib::Request& req, httplib::Response& res) {
    if (!im->authorized(req, res)) return;
    OJson m = {{"id", im->config.served_model_name},
               {"object", "model"},
               {"created", now_seconds()},
               {"owned_by", "mxserve"},
               {"max_model_len", im->context()}};
    res.set_content(OJson({{"object", "list"}, {"data", OJson::array({m})}}).dump(),
                    "application/json");
  });
  s.Post("/v1/completions", [im](const httplib::Request& req, httplib::Response& res) {
    im->handle(req, res, false);
  });
  s.Post("/v1/chat/completions",
         [im](const httplib::Request& req, httplib::Response& res) { im->handle(req, res, true); });
}

OpenAiServer::~OpenAiServer() { stop(); }

Status OpenAiServer::run() {
  httplib::Server& s = impl_->http;
  const ServerConfig& c = impl_->config;
  if (c.port == 0) {
    bound_port_ = s.bind_to_any_port(c.host);
  } else {
    bound_port_ = s.bind_to_port(c.host, c.port) ? c.port : -1;
  }
  if (bound_port_ <= 0) {
    return io_error("cannot listen on " + c.host + ":" + std::to_string(c.port));
  }
  MX_LOG_INFO("serving " + c.served_model_name + " on http://" + c.host + ":" +
              std::to_string(bound_port_));
  if (!s.listen_after_bind()) return io_error("the HTTP server stopped with an error");
  return Status::ok();
}

void OpenAiServer::stop() { impl_->http.stop(); }

}  // namespace mx
