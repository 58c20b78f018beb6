#include "server/openai_server.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>

#include "core/json_util.h"
#include "core/log.h"
#include "server/chat_translate.h"
#include "server/completion_job.h"
#include "server/embeddings_api.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"
#include "server/output_parser.h"
#include "server/tool_parser.h"
#include "server/web_ui.h"

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

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

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
  std::unique_ptr<ImageLoader> image_loader;  // a vision model's
  int64_t started = now_seconds();
  // The vocabulary's trie for constrained decoding, built once.
  std::shared_ptr<const TokenVocab> vocab;
  std::atomic<bool> shutting_down{false};
  std::atomic<int> signals_seen{0};
  std::mutex live_mu;
  std::set<uint64_t> live;  // engine ids of running generations, for the shutdown
  EngineStats last_stats;
  Clock::time_point last_stats_time = Clock::now();
  // Responses kept for previous_response_id: as many as an agent session needs, for an hour.
  ResponseStore responses{4096, std::chrono::hours(1)};

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
    vocab = build_vocab();
    engine =
        std::make_unique<Engine>(model, *tok, config.scheduler, config.spec, config.draft_model);
    if (config.images.tower != nullptr) {
      image_loader = std::make_unique<ImageLoader>(config.images, 2);
    }
  }

  std::shared_ptr<const TokenVocab> build_vocab() const {
    std::vector<std::string> bytes;
    std::vector<int32_t> specials;
    for (int32_t id = 0; id < tok->vocab_size(); ++id) {
      bytes.push_back(tok->token_bytes(id));
      if (tok->is_special(id)) specials.push_back(id);
    }
    return std::make_shared<const TokenVocab>(bytes, stop_ids, specials);
  }
  ~Impl() {
    // Its jobs end by handing work to the engine.
    image_loader.reset();
    engine.reset();
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
    if (config.images.tower != nullptr) {
      c.image_pad_id = config.images.tower->config().image_token_id;
      c.max_images = config.images.max_images;
    }
    return c;
  }

  std::optional<HttpReply> check_head(const HttpHead& h) const {
    if (config.api_key.empty() || h.path.rfind("/v1/", 0) != 0) return std::nullopt;
    if (h.header("authorization") == "Bearer " + config.api_key) return std::nullopt;
    // Anthropic's clients send the key in x-api-key.
    if (h.header("x-api-key") == config.api_key) return std::nullopt;
    return error_reply({401, "Incorrect or missing API key", "authentication_error"});
  }

  void handle(const HttpHead& h, std::string body, std::shared_ptr<HttpExchange> ex) {
    if (const WebFile* page = config.web_ui ? find_web_file(h.path) : nullptr) {
      if (h.method != "GET") {
        return ex->send(error_reply(
            {405, "method " + h.method + " is not allowed on " + h.path + "; use GET"}));
      }
      return ex->send(web_file_reply(*page));
    }
    struct Route {
      const char* path;
      const char* method;
      bool prefix;  // the path continues with an id
    };
    static const Route kRoutes[] = {{"/health", "GET", false},
                                    {"/metrics", "GET", false},
                                    {"/version", "GET", false},
                                    {"/v1/models", "GET", false},
                                    {"/v1/models/", "GET", true},
                                    {"/tokenize", "POST", false},
                                    {"/detokenize", "POST", false},
                                    {"/v1/completions", "POST", false},
                                    {"/v1/chat/completions", "POST", false},
                                    {"/v1/messages", "POST", false},
                                    {"/v1/responses", "POST", false},
                                    {"/v1/embeddings", "POST", false}};
    const Route* route = nullptr;
    for (const Route& r : kRoutes) {
      const bool match = r.prefix ? h.path.size() > std::strlen(r.path) &&
                                        h.path.compare(0, std::strlen(r.path), r.path) == 0
                                  : h.path == r.path;
      if (match) route = &r;
    }
    if (!route) return ex->send(error_reply({404, "no such endpoint: " + h.path}));
    if (h.method != route->method) {
      return ex->send(error_reply(
          {405, "method " + h.method + " is not allowed on " + h.path + "; use " + route->method}));
    }
    const std::string path = route->path;
    if (path == "/health") return ex->send({200, "text/plain", "ok"});
    if (path == "/metrics") return ex->send({200, "text/plain; version=0.0.4", metrics()});
    if (path == "/version") return ex->send(json_reply({{"version", MX_VERSION}}));
    if (path == "/v1/models") return ex->send(json_reply(models()));
    if (path == "/v1/models/") return ex->send(model_reply(h.path.substr(path.size())));
    if (path == "/tokenize" || path == "/detokenize") {
      return ex->send(token_reply(path == "/tokenize", body));
    }
    if (path == "/v1/messages") return messages(h, body, std::move(ex));
    if (path == "/v1/responses") return responses_api(h, body, std::move(ex));
    if (path == "/v1/embeddings") return embeddings(h, body, std::move(ex));
    generate(h, body, std::move(ex), path == "/v1/chat/completions");
  }

  // The Messages and Responses APIs run as chat requests whose replies are translated.
  void messages(const HttpHead& h, const std::string& text, std::shared_ptr<HttpExchange> ex) {
    OJson body;
    if (auto e = parse_body(text, &body)) return ex->send(messages_error(*e));
    auto chat = messages_to_chat(body);
    if (!chat.is_ok()) return ex->send(messages_error({400, chat.status().message()}));
    generate(h, chat->dump(),
             translating_exchange(std::move(ex), messages_translator(config.served_model_name)),
             true);
  }

  // Pooled hidden states, computed on the engine thread between two generation steps.
  void embeddings(const HttpHead& h, const std::string& text, std::shared_ptr<HttpExchange> ex) {
    const std::string rid = random_id("embd-");
    OJson body;
    if (auto e = parse_body(text, &body)) return reject(rid, h.path, *e, ex);
    if (model.dp_size() > 1) {
      return reject(rid, h.path, {400, "embeddings are not served under --enable-dp-attention yet"},
                    ex);
    }
    auto req = std::make_shared<EmbeddingsRequest>();
    HttpError err{400, ""};
    if (!parse_embeddings(body, protocol(), config.pooling, req.get(), &err)) {
      return reject(rid, h.path, err, ex);
    }
    engine->run_between_steps([this, req, ex, rid, path = h.path] {
      auto v = embed_inputs(model, req->inputs, config.pooling, false);
      if (!v.is_ok()) return reject(rid, path, {400, v.status().message()}, ex);
      MX_LOG_INFO("request " + rid + " " + path + ": 200, " + std::to_string(req->inputs.size()) +
                  " inputs, " + std::to_string(req->tokens) + " tokens");
      ex->send(json_reply(embeddings_reply(std::move(*v), *req, config.served_model_name)));
    });
  }

  void responses_api(const HttpHead& h, const std::string& text, std::shared_ptr<HttpExchange> ex) {
    OJson body;
    if (auto e = parse_body(text, &body)) return ex->send(error_reply(*e));
    auto req = responses_to_chat(body, responses);
    if (!req.is_ok()) {
      const std::string msg = req.status().message();
      return ex->send(
          error_reply({400, msg, "invalid_request_error", msg.substr(0, msg.find(':'))}));
    }
    const std::string chat = req->chat.dump();
    generate(h, chat, translating_exchange(std::move(ex), responses_translator(*req, responses)),
             true);
  }

  OJson model_card() const {
    return {{"id", config.served_model_name},
            {"object", "model"},
            {"created", started},
            {"owned_by", "mxserve"},
            {"root", config.served_model_name},
            {"parent", nullptr},
            {"max_model_len", context()}};
  }

  OJson models() const { return {{"object", "list"}, {"data", OJson::array({model_card()})}}; }

  HttpReply model_reply(const std::string& id) const {
    if (id != config.served_model_name) {
      return error_reply(
          {404, "The model '" + id + "' does not exist", "invalid_request_error", "model"});
    }
    return json_reply(model_card());
  }

  // A JSON object body, or the error that refuses it.
  static std::optional<HttpError> parse_body(const std::string& text, OJson* body) {
    // The body is JSON whatever its Content-Type, as vLLM and SGLang read it (curl -d sends
    // application/x-www-form-urlencoded).
    if (json_nests_deeper_than(text, kMaxJsonDepth)) {
      return HttpError{400, "the request body nests JSON deeper than " +
                                std::to_string(kMaxJsonDepth) + " levels"};
    }
    *body = OJson::parse(text, nullptr, false);
    if (body->is_discarded() || !body->is_object()) {
      return HttpError{400, "the request body is not a JSON object"};
    }
    return std::nullopt;
  }

  // vLLM's /tokenize and /detokenize shapes.
  HttpReply token_reply(bool encode, const std::string& text) const {
    OJson body;
    if (auto e = parse_body(text, &body)) return error_reply(*e);
    std::string model_name;
    if (body.contains("model") && body["model"].is_string()) model_name = body["model"];
    if (!model_name.empty() && model_name != config.served_model_name) {
      return error_reply(
          {404, "The model '" + model_name + "' does not exist", "invalid_request_error", "model"});
    }
    if (encode) {
      std::vector<int32_t> ids;
      HttpError err{400, ""};
      if (!tokenize_request(body, protocol(), &ids, &err)) return error_reply(err);
      OJson out = {{"count", ids.size()}, {"max_model_len", context()}, {"tokens", ids}};
      const bool strs = body.contains("return_token_strs") && body["return_token_strs"] == true;
      OJson token_strs = OJson::array();
      for (int32_t id : ids) token_strs.push_back(repair_utf8(tok->token_bytes(id)));
      out["token_strs"] = strs ? token_strs : OJson();
      return json_reply(out);
    }
    auto t = body.find("tokens");
    std::vector<int32_t> ids;
    const bool list = t != body.end() && t->is_array();
    for (size_t i = 0; list && i < t->size(); ++i) {
      const OJson& v = (*t)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok->vocab_size())
        return error_reply({400, "'tokens' holds " + v.dump() + ", not a token id",
                            "invalid_request_error", "tokens"});
      ids.push_back(v.get<int32_t>());
    }
    if (!list)
      return error_reply(
          {400, "'tokens' must be a list of token ids", "invalid_request_error", "tokens"});
    return json_reply({{"prompt", tok->decode(ids)}});
  }

  void reject(const std::string& rid, const std::string& path, const HttpError& e,
              const std::shared_ptr<HttpExchange>& ex) {
    MX_LOG_INFO("request " + rid + " " + path + ": " + std::to_string(e.status) + ", " + e.message);
    ex->send(error_reply(e));
  }

  // The output side of a chat request: reasoning and tool calls, and the grammar that
  // tool_choice required or named imposes. Fails with the request's error.
  std::optional<HttpError> chat_output(const ParsedRequest& pr, const std::string& prompt_text,
                                       JobSetup* js, std::shared_ptr<const Grammar>* grammar) {
    const bool tools_on = !pr.tools.is_null() && pr.tool_choice != OJson("none");
    std::shared_ptr<const Grammar> forced;
    if (auto e = tool_output(pr, tools_on, &forced)) return e;
    // A forced call is the whole reply, so the response format (which shapes a text answer,
    // the next turn's) has nothing to apply to here; agent frameworks send both.
    if (forced) *grammar = forced;
    const std::string tool_parser = tools_on ? config.tool_call_parser : "";
    const std::string reasoning = config.reasoning_parser;
    if (tool_parser.empty() && reasoning.empty()) return std::nullopt;
    // Under a grammar the output is the constrained text from its first token, so it does
    // not begin inside a think block whatever the prompt opened.
    const bool in_think = !reasoning.empty() && !*grammar && prompt_opens_think(prompt_text);
    OJson tools = pr.tools;
    const bool parallel = pr.parallel_tool_calls;
    js->parser = [tool_parser, reasoning, in_think, tools, parallel] {
      return make_output_parser(tool_parser, reasoning, in_think, tools, parallel);
    };
    return std::nullopt;
  }

  std::optional<HttpError> tool_output(const ParsedRequest& pr, bool tools_on,
                                       std::shared_ptr<const Grammar>* forced) {
    if (!tools_on) return std::nullopt;
    const std::string& parser = config.tool_call_parser;
    auto spec = tool_call_grammar(pr.tools, pr.tool_choice, parser.empty() ? "hermes" : parser);
    if (!spec.is_ok()) {
      return HttpError(400, spec.status().message(), "invalid_request_error", "tools");
    }
    if (!*spec) return std::nullopt;
    if (parser.empty()) {
      return HttpError{400,
                       "a tool_choice that forces a call needs tool-call parsing, which this "
                       "server runs with --tool-call-parser none",
                       "invalid_request_error", "tool_choice"};
    }
    ToolCallGrammar g = std::move(**spec);
    if (!pr.parallel_tool_calls) g.max_repeat = 1;
    // The same tools and choice compile to the same grammar: reuse it and its masks.
    const std::string key = "tools:" + parser + (pr.parallel_tool_calls ? "+" : "1") +
                            pr.tool_choice.dump() + pr.tools.dump();
    auto compiled = GrammarCache::shared().get(key, [&] {
      return grammar_from_sequences(g.alternatives, g.min_repeat, g.max_repeat, g.separator);
    });
    if (!compiled.is_ok()) {
      return HttpError(400, "tools: " + compiled.status().message(), "invalid_request_error",
                       "tools");
    }
    *forced = *compiled;
    return std::nullopt;
  }

  void generate(const HttpHead& h, const std::string& text, std::shared_ptr<HttpExchange> ex,
                bool chat) {
    const std::string rid = random_id(chat ? "chatcmpl-" : "cmpl-");
    OJson body;
    if (auto e = parse_body(text, &body)) return reject(rid, h.path, *e, ex);
    ParsedRequest pr;
    HttpError err{400, ""};
    if (!parse_request(body, chat, protocol(), &pr, &err)) return reject(rid, h.path, err, ex);
    if (!pr.ignored_fields.empty()) {
      std::string names;
      for (const std::string& f : pr.ignored_fields) names += (names.empty() ? "" : ", ") + f;
      MX_LOG_DEBUG("request " + rid + ": ignoring unknown fields " + names);
    }
    JobSetup js;
    js.rid = rid;
    js.model = config.served_model_name;
    js.path = h.path;
    js.chat = chat;
    js.stream = pr.stream;
    js.include_usage = pr.include_usage;
    js.want_logprobs = pr.top_logprobs >= 0;
    js.echo = pr.echo;
    js.n = pr.n;
    js.best_of = pr.best_of;
    js.prompts = static_cast<int>(pr.prompts.size());
    js.prompt_texts = pr.prompt_texts;
    js.return_token_ids = pr.return_token_ids;
    js.prompt_ids = pr.prompts;
    js.shutting_down = &shutting_down;
    js.on_sequence_done = [this](uint64_t id) {
      std::lock_guard<std::mutex> lock(live_mu);
      live.erase(id);
    };
    std::shared_ptr<const Grammar> grammar = pr.grammar;
    if (chat) {
      if (auto e = chat_output(pr, pr.prompt_texts[0], &js, &grammar)) {
        return reject(rid, h.path, *e, ex);
      }
    }
    if (grammar && !vocab) {
      return reject(rid, h.path, {400, "structured output is not available on this server"}, ex);
    }
    // A new grammar's masks are computed here, on the request's thread, so that the engine's
    // steps (every running sequence's next token) never wait on one. A grammar already done
    // returns at once.
    if (grammar) precompute_masks(*grammar, *vocab, kMaskAheadBudget);
    if (!pr.image_urls.empty())
      return with_images(h.path, std::move(js), std::move(pr), grammar, ex);
    auto job = std::make_shared<CompletionJob>(std::move(js), *tok, ex);
    submit_all(job, std::make_shared<const ParsedRequest>(std::move(pr)), grammar, ex);
  }

  // Images are fetched and decoded on the image loader's threads; the tower runs on the engine
  // thread between two steps (it shares the model's threads), which then submits the request
  // with the images' embeddings.
  void with_images(const std::string& path, JobSetup js, ParsedRequest pr,
                   std::shared_ptr<const Grammar> grammar, std::shared_ptr<HttpExchange> ex) {
    auto setup = std::make_shared<JobSetup>(std::move(js));
    auto req = std::make_shared<ParsedRequest>(std::move(pr));
    std::vector<std::string> urls = req->image_urls;
    image_loader->load(std::move(urls), [this, setup, req, grammar, ex, path](
                                            std::optional<HttpError> err,
                                            std::vector<PixelPatches> images, bool cancelled) {
      if (cancelled) {
        return reject(setup->rid, path, {503, "the server is shutting down", "server_error"}, ex);
      }
      if (err) return reject(setup->rid, path, *err, ex);
      auto px = std::make_shared<std::vector<PixelPatches>>(std::move(images));
      engine->run_between_steps([this, setup, req, px, grammar, ex, path] {
        if (shutting_down) {
          return reject(setup->rid, path, {503, "the server is shutting down", "server_error"}, ex);
        }
        auto mm = build_multimodal_prompt(*config.images.tower, req->prompts[0], *px);
        if (!mm.is_ok()) return reject(setup->rid, path, {400, mm.status().message()}, ex);
        req->prompts[0] = mm->ids;
        setup->prompt_ids = req->prompts;
        auto shared = std::make_shared<const MultimodalPrompt>(std::move(*mm));
        auto job = std::make_shared<CompletionJob>(std::move(*setup), *tok, ex);
        submit_all(job, req, grammar, ex, shared);
      });
    });
  }

  // One engine request per sequence. The first candidate of each prompt goes at once; its
  // siblings follow its first token, when the prompt's KV is in the prefix cache to share.
  void submit_all(const std::shared_ptr<CompletionJob>& job,
                  const std::shared_ptr<const ParsedRequest>& req,
                  const std::shared_ptr<const Grammar>& grammar,
                  const std::shared_ptr<HttpExchange>& ex,
                  const std::shared_ptr<const MultimodalPrompt>& images = nullptr) {
    const ParsedRequest& pr = *req;
    struct Shared {
      std::atomic<bool> gone{false};
      std::vector<std::atomic<bool>> siblings_sent;
      explicit Shared(size_t n) : siblings_sent(n) {}
    };
    const size_t best_of = static_cast<size_t>(pr.best_of);
    auto shared = std::make_shared<Shared>(pr.prompts.size());
    auto make = [this, req, grammar, best_of, images](size_t s) {
      const ParsedRequest& r = *req;
      EngineRequest er;
      er.prompt = r.prompts[s / best_of];
      er.multimodal = images;
      er.params = r.params;
      const size_t candidate = s % best_of;
      if (er.params.seed && candidate > 0) *er.params.seed += candidate;
      // best_of ranks by the sampled tokens' log-probs, so they are computed even unasked.
      er.top_logprobs = r.top_logprobs >= 0 ? r.top_logprobs : r.best_of > r.n ? 0 : -1;
      if (grammar) er.grammar = std::make_shared<GrammarMatcher>(grammar, vocab);
      return er;
    };
    auto submit = std::make_shared<std::function<bool(size_t)>>();
    std::weak_ptr<std::function<bool(size_t)>> self = submit;
    *submit = [this, job, make, shared, best_of, self](size_t s) {
      EngineRequest er = make(s);
      // Held by the engine request itself, so the siblings can still be sent after this call.
      std::shared_ptr<std::function<bool(size_t)>> again = self.lock();
      er.on_event = [this, job, s, shared, best_of, again](const StreamEvent& e) {
        job->on_event(s, e);
        const size_t p = s / best_of;
        const bool cut = e.finished && e.finish_reason == "cancelled";
        if (s % best_of != 0 || best_of == 1 || cut || shared->gone.load() ||
            shared->siblings_sent[p].exchange(true)) {
          return;
        }
        for (size_t c = 1; c < best_of; ++c) {
          if (!(*again)(p * best_of + c)) break;
        }
      };
      auto id = engine->submit(std::move(er));
      if (!id.is_ok()) {
        const bool full = id.status().code() == StatusCode::kOutOfRange;
        shared->gone = true;
        for (uint64_t other : job->engine_ids()) engine->cancel(other);
        job->fail({full ? 503 : 400, id.status().message(),
                   full ? "server_busy" : "invalid_request_error"});
        return false;
      }
      {
        std::lock_guard<std::mutex> lock(live_mu);
        live.insert(*id);
      }
      job->admitted(s, *id);
      return true;
    };
    for (size_t p = 0; p < pr.prompts.size(); ++p) {
      if (!(*submit)(p * best_of)) return;
      if (best_of == 1) shared->siblings_sent[p] = true;
    }
    Engine* eng = engine.get();
    std::weak_ptr<CompletionJob> weak = job;
    ex->on_disconnect([eng, weak, shared] {
      shared->gone = true;
      if (auto j = weak.lock()) {
        for (uint64_t id : j->engine_ids()) eng->cancel(id);
      }
    });
  }

  // vLLM's spec_decode counters, under this server's prefix.
  template <typename Gauge>
  static void spec_metrics(const EngineStats& s, Gauge& gauge, std::string* out) {
    gauge("mxserve_spec_decode_num_drafts_total", "Verify steps of a request that drafted.",
          "counter", static_cast<double>(s.spec_drafts));
    gauge("mxserve_spec_decode_num_draft_tokens_total", "Drafted tokens verified.", "counter",
          static_cast<double>(s.spec_draft_tokens));
    gauge("mxserve_spec_decode_num_accepted_tokens_total", "Drafted tokens accepted.", "counter",
          static_cast<double>(s.spec_accepted_tokens));
    const char* per = "mxserve_spec_decode_num_accepted_tokens_per_pos_total";
    *out += std::string("# HELP ") + per + " Drafted tokens accepted at each draft position.\n" +
            "# TYPE " + per + " counter\n";
    for (size_t p = 0; p < s.spec_accepted_per_pos.size(); ++p) {
      *out += std::string(per) + "{position=\"" + std::to_string(p) + "\"} " +
              std::to_string(static_cast<double>(s.spec_accepted_per_pos[p])) + "\n";
    }
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
    gauge("mxserve_kv_cache_blocks_cached", "KV cache blocks held by the prefix cache.", "gauge",
          static_cast<double>(s.kv_blocks_cached));
    gauge("mxserve_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          "counter", static_cast<double>(s.prefix_cache_queries));
    gauge("mxserve_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", "counter",
          static_cast<double>(s.prefix_cache_hits));
    gauge("mxserve_prefix_cache_hit_rate",
          "Prefix-cache hits over queries, in tokens, since start.", "gauge",
          s.prefix_cache_queries ? static_cast<double>(s.prefix_cache_hits) /
                                       static_cast<double>(s.prefix_cache_queries)
                                 : 0.0);
    gauge("mxserve_requests_finished_total", "Requests finished.", "counter",
          static_cast<double>(s.finished_requests));
    gauge("mxserve_preemptions_total", "Requests preempted for KV space.", "counter",
          static_cast<double>(s.preemptions));
    gauge("mxserve_http_connections", "Open HTTP connections.", "gauge",
          static_cast<double>(http->open_connections()));
    if (!s.spec_accepted_per_pos.empty()) spec_metrics(s, gauge, &out);
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
  if (c.web_ui) {
    MX_LOG_INFO("chat page: http://" + c.host + ":" + std::to_string(bound_port_) + "/");
  }
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
