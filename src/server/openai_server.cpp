#include "server/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>

#include "core/log.h"

namespace mx {
namespace {

using OJson = nlohmann::ordered_json;

struct HttpError {
  HttpError(int s, std::string m, std::string t = "invalid_request_error", std::string p = "")
      : status(s), message(std::move(m)), type(std::move(t)), param(std::move(p)) {}
  int status;
  std::string message;
  std::string type;
  std::string param;
};

std::string error_body(const HttpError& e) {
  OJson j = {{"error",
              {{"message", e.message},
               {"type", e.type},
               {"param", e.param.empty() ? OJson() : OJson(e.param)},
               {"code", e.status}}}};
  return j.dump();
}

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

// Typed optional fields of the request body; wrong types are a 400 naming the field.
template <typename T>
bool get_field(const OJson& body, const char* key, T* out, HttpError* err) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) throw std::invalid_argument("type");
    } else if constexpr (std::is_arithmetic_v<T>) {
      if (!it->is_number()) throw std::invalid_argument("type");
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string()) throw std::invalid_argument("type");
    }
    *out = it->get<T>();
    return true;
  } catch (const std::exception&) {
    *err = {400, std::string("'") + key + "' has the wrong type", "invalid_request_error", key};
    return false;
  }
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

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    if (config.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + config.api_key) return true;
    send_error(res, {401, "Incorrect or missing API key", "authentication_error"});
    return false;
  }

  bool parse_sampling(const OJson& body, bool chat, int64_t prompt_len, SamplingParams* p,
                      HttpError* err) {
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    int64_t max_tokens = chat ? context() - prompt_len : 16;
    int64_t n = 1;
    if (!get_field(body, "max_tokens", &max_tokens, err) ||
        !get_field(body, "max_completion_tokens", &max_tokens, err) ||
        !get_field(body, "temperature", &p->temperature, err) ||
        !get_field(body, "top_p", &p->top_p, err) || !get_field(body, "top_k", &p->top_k, err) ||
        !get_field(body, "min_p", &p->min_p, err) ||
        !get_field(body, "presence_penalty", &p->presence_penalty, err) ||
        !get_field(body, "frequency_penalty", &p->frequency_penalty, err) ||
        !get_field(body, "repetition_penalty", &p->repetition_penalty, err) ||
        !get_field(body, "ignore_eos", &p->ignore_eos, err) || !get_field(body, "n", &n, err)) {
      return false;
    }
    if (auto s = body.find("seed"); s != body.end() && !s->is_null()) {
      if (!s->is_number_integer()) {
        *err = {400, "'seed' must be an integer", "invalid_request_error", "seed"};
        return false;
      }
      p->seed = static_cast<uint64_t>(s->get<int64_t>());
    }
    if (n != 1) {
      *err = {400, "only n = 1 is supported", "invalid_request_error", "n"};
      return false;
    }
    if (max_tokens < 1) {
      *err = {400, "'max_tokens' must be at least 1", "invalid_request_error", "max_tokens"};
      return false;
    }
    if (p->temperature < 0 || p->temperature > 2 || p->top_p <= 0 || p->top_p > 1) {
      *err = {400, "temperature must be in [0, 2] and top_p in (0, 1]", "invalid_request_error",
              "temperature"};
      return false;
    }
    if (auto s = body.find("stop"); s != body.end() && !s->is_null()) {
      if (s->is_string()) {
        p->stop.push_back(s->get<std::string>());
      } else if (s->is_array() && s->size() <= 4) {
        for (const OJson& v : *s) {
          if (!v.is_string()) {
            *err = {400, "'stop' must be a string or a list of up to 4 strings",
                    "invalid_request_error", "stop"};
            return false;
          }
          p->stop.push_back(v.get<std::string>());
        }
      } else {
        *err = {400, "'stop' must be a string or a list of up to 4 strings",
                "invalid_request_error", "stop"};
        return false;
      }
    }
    if (prompt_len + max_tokens > context()) {
      *err = {400,
              "the prompt (" + std::to_string(prompt_len) + " tokens) plus max_tokens (" +
                  std::to_string(max_tokens) + ") exceeds the context length of " +
                  std::to_string(context()),
              "invalid_request_error", "max_tokens"};
      return false;
    }
    p->max_tokens = static_cast<int>(max_tokens);
    p->stop_token_ids = stop_ids;
    return true;
  }

  bool prompt_of(const OJson& body, bool chat, std::vector<int32_t>* ids, HttpError* err) {
    if (!chat) {
      auto it = body.find("prompt");
      if (it == body.end()) {
        *err = {400, "'prompt' is required", "invalid_request_error", "prompt"};
        return false;
      }
      if (it->is_string()) {
        *ids = tok->encode(it->get<std::string>());
      } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
        *ids = tok->encode((*it)[0].get<std::string>());
      } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
        for (const OJson& v : *it) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
              v.get<int64_t>() >= tok->vocab_size()) {
            *err = {400, "'prompt' holds an invalid token id", "invalid_request_error", "prompt"};
            return false;
          }
          ids->push_back(v.get<int32_t>());
        }
      } else {
        *err = {400, "'prompt' must be a string or a list of token ids", "invalid_request_error",
                "prompt"};
        return false;
      }
    } else {
      auto it = body.find("messages");
      if (it == body.end() || !it->is_array() || it->empty()) {
        *err = {400, "'messages' must be a non-empty list", "invalid_request_error", "messages"};
        return false;
      }
      OJson messages = OJson::array();
      for (const OJson& m : *it) {
        if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
          *err = {400, "each message needs a string 'role'", "invalid_request_error", "messages"};
          return false;
        }
        OJson msg = m;
        // Content given as parts: join the text parts.
        if (m.contains("content") && m["content"].is_array()) {
          std::string text;
          for (const OJson& part : m["content"]) {
            if (part.is_object() && part.value("type", "") == "text" && part.contains("text") &&
                part["text"].is_string()) {
              text += part["text"].get<std::string>();
            }
          }
          msg["content"] = text;
        } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
          *err = {400, "message content must be a string or a list of parts",
                  "invalid_request_error", "messages"};
          return false;
        }
        if (!msg.contains("content") || msg["content"].is_null()) msg["content"] = "";
        messages.push_back(msg);
      }
      if (!tmpl) {
        *err = {400, "this model has no chat template", "invalid_request_error", "messages"};
        return false;
      }
      OJson extra = OJson::object();
      if (body.contains("tools") && body["tools"].is_array()) extra["tools"] = body["tools"];
      if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object()) {
        for (auto kv = body["chat_template_kwargs"].begin();
             kv != body["chat_template_kwargs"].end(); ++kv) {
          extra[kv.key()] = kv.value();
        }
      }
      auto text = tmpl->apply(messages, true, extra);
      if (!text.is_ok()) {
        *err = {400, text.status().message(), "invalid_request_error", "messages"};
        return false;
      }
      *ids = tok->encode(*text);
    }
    if (ids->empty()) {
      *err = {400, "the prompt is empty", "invalid_request_error", "prompt"};
      return false;
    }
    return true;
  }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    ++requests_total;
    if (!authorized(req, res)) return;
    OJson body = OJson::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
      send_error(res, {400, "the request body is not a JSON object", "invalid_request_error"});
      return;
    }
    std::string model_name;
    HttpError err{400, ""};
    if (!get_field(body, "model", &model_name, &err)) return send_error(res, err);
    if (!model_name.empty() && model_name != config.served_model_name) {
      return send_error(res, {404, "The model '" + model_name + "' does not exist",
                              "invalid_request_error", "model"});
    }
    std::vector<int32_t> prompt;
    SamplingParams params;
    bool stream = false, include_usage = false;
    if (!prompt_of(body, chat, &prompt, &err) ||
        !parse_sampling(body, chat, static_cast<int64_t>(prompt.size()), &params, &err) ||
        !get_field(body, "stream", &stream, &err)) {
      return send_error(res, err);
    }
    if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
      include_usage = so->value("include_usage", false);
    }
    auto state = std::make_shared<RequestState>();
    EngineRequest er;
    er.prompt = prompt;
    er.params = params;
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
      for (const StreamEvent& e : state->events) {
        text += e.text;
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
      choice["logprobs"] = nullptr;
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
          auto chunk = [&](const std::string& text, const OJson& reason) {
            OJson choice = {{"index", 0}, {"finish_reason", reason}, {"logprobs", nullptr}};
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
              if (!e.text.empty() && !chunk(e.text, nullptr)) {
                eng->cancel(engine_id);  // the client went away
                return false;
              }
              continue;
            }
            if (!chunk(e.text, e.finish_reason)) return false;
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
