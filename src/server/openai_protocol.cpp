#include "server/openai_protocol.h"

#include <cmath>
#include <cstdint>

namespace mx {

std::string error_body(const HttpError& e) {
  OJson j = {{"error",
              {{"message", e.message},
               {"type", e.type},
               {"param", e.param.empty() ? OJson() : OJson(e.param)},
               {"code", e.status}}}};
  return j.dump();
}

namespace {

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

// An integer field in [lo, hi]. A float is accepted only when it is a whole number (as
// Python's int fields take 16.0); a fraction, a value past int64 or one out of range is a 400
// naming the field, never a wrapped or truncated value.
bool get_int_field(const OJson& body, const char* key, int64_t lo, int64_t hi, int64_t* out,
                   HttpError* err) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  auto fail = [&](const std::string& why) {
    *err = {400, std::string("'") + key + "' must be " + why + ", got " + it->dump(),
            "invalid_request_error", key};
    return false;
  };
  const std::string range =
      hi < INT64_MAX   ? "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"
      : lo > INT64_MIN ? "an integer of at least " + std::to_string(lo)
                       : std::string("an integer of at most 64 bits");
  int64_t v = 0;
  if (it->is_number_unsigned()) {
    if (it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return fail(range);
    v = static_cast<int64_t>(it->get<uint64_t>());
  } else if (it->is_number_integer()) {
    v = it->get<int64_t>();
  } else if (it->is_number_float()) {
    // Below 2^53 a double holds every integer exactly, so the cast cannot overflow.
    const double d = it->get<double>();
    if (!(std::fabs(d) < 9007199254740992.0) || d != std::floor(d)) return fail(range);
    v = static_cast<int64_t>(d);
  } else {
    return fail(range);
  }
  if (v < lo || v > hi) return fail(range);
  *out = v;
  return true;
}

// A sampling parameter: a JSON number in the range sampling_param_error allows.
template <typename T>
bool get_sampling_field(const OJson& body, const char* key, T* out, HttpError* err) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_number()) {
    *err = {400, std::string("'") + key + "' has the wrong type", "invalid_request_error", key};
    return false;
  }
  const double v = it->get<double>();
  if (std::string why = sampling_param_error(key, v); !why.empty()) {
    *err = {400, why, "invalid_request_error", key};
    return false;
  }
  *out = static_cast<T>(v);
  return true;
}

bool parse_stop(const OJson& body, SamplingParams* p, HttpError* err) {
  auto s = body.find("stop");
  if (s == body.end() || s->is_null()) return true;
  const char* why = "'stop' must be a string or a list of up to 4 strings";
  if (s->is_string()) {
    p->stop.push_back(s->get<std::string>());
  } else if (s->is_array() && s->size() <= 4) {
    for (const OJson& v : *s) {
      if (!v.is_string()) {
        *err = {400, why, "invalid_request_error", "stop"};
        return false;
      }
      p->stop.push_back(v.get<std::string>());
    }
  } else {
    *err = {400, why, "invalid_request_error", "stop"};
    return false;
  }
  // As vLLM: an empty stop string would match before the first token.
  for (const std::string& stop : p->stop) {
    if (stop.empty()) {
      *err = {400, "'stop' cannot contain an empty string", "invalid_request_error", "stop"};
      return false;
    }
  }
  return true;
}

// max_tokens (or max_completion_tokens, its newer name) against the room the prompt leaves in
// the context; every sum stays in int64 (the prompt is shorter than the context by then).
bool parse_max_tokens(const OJson& body, bool chat, int64_t prompt_len, const ProtocolContext& ctx,
                      SamplingParams* p, HttpError* err) {
  if (prompt_len >= ctx.context) {
    *err = {400,
            "the prompt (" + std::to_string(prompt_len) +
                " tokens) leaves no room to generate in the context length of " +
                std::to_string(ctx.context),
            "invalid_request_error", chat ? "messages" : "prompt"};
    return false;
  }
  const int64_t room = ctx.context - prompt_len;
  int64_t max_tokens = chat ? room : 16;
  const char* key =
      body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null()
          ? "max_completion_tokens"
          : "max_tokens";
  if (!get_int_field(body, key, 1, INT64_MAX, &max_tokens, err)) return false;
  if (max_tokens > room) {
    *err = {400,
            "the prompt (" + std::to_string(prompt_len) + " tokens) plus " + key + " (" +
                std::to_string(max_tokens) + ") exceeds the context length of " +
                std::to_string(ctx.context),
            "invalid_request_error", key};
    return false;
  }
  // The context is bounded by the model config (kMaxConfigSize), so this fits an int.
  p->max_tokens = static_cast<int>(max_tokens);
  return true;
}

bool parse_sampling(const OJson& body, bool chat, int64_t prompt_len, const ProtocolContext& ctx,
                    SamplingParams* p, HttpError* err) {
  p->temperature = 1.0f;
  p->top_p = 1.0f;
  int64_t n = 1, seed = 0;
  if (!get_sampling_field(body, "temperature", &p->temperature, err) ||
      !get_sampling_field(body, "top_p", &p->top_p, err) ||
      !get_sampling_field(body, "top_k", &p->top_k, err) ||
      !get_sampling_field(body, "min_p", &p->min_p, err) ||
      !get_sampling_field(body, "presence_penalty", &p->presence_penalty, err) ||
      !get_sampling_field(body, "frequency_penalty", &p->frequency_penalty, err) ||
      !get_sampling_field(body, "repetition_penalty", &p->repetition_penalty, err) ||
      !get_field(body, "ignore_eos", &p->ignore_eos, err) ||
      !get_int_field(body, "n", INT64_MIN, INT64_MAX, &n, err) ||
      !get_int_field(body, "seed", INT64_MIN, INT64_MAX, &seed, err)) {
    return false;
  }
  if (body.contains("seed") && !body["seed"].is_null()) p->seed = static_cast<uint64_t>(seed);
  if (n != 1) {
    *err = {400, "'n' must be 1 (one choice per request is supported), got " + std::to_string(n),
            "invalid_request_error", "n"};
    return false;
  }
  if (!parse_stop(body, p, err) || !parse_max_tokens(body, chat, prompt_len, ctx, p, err)) {
    return false;
  }
  p->stop_token_ids = ctx.stop_ids;
  return true;
}

// Before tokenizing: a text so long that even the longest tokens could not fit it in the
// context fails at once, so a huge prompt costs no BPE time.
bool fits_context(size_t bytes, const ProtocolContext& ctx, const char* param, HttpError* err) {
  const uint64_t most = 3ull * ctx.tok->max_token_bytes() * static_cast<uint64_t>(ctx.context);
  if (bytes <= most) return true;
  *err = {400,
          "the prompt (" + std::to_string(bytes) + " bytes) is longer than the context length of " +
              std::to_string(ctx.context) + " tokens can hold",
          "invalid_request_error", param};
  return false;
}

bool prompt_of(const OJson& body, bool chat, const ProtocolContext& ctx, std::vector<int32_t>* ids,
               HttpError* err) {
  if (!chat) {
    auto it = body.find("prompt");
    if (it == body.end()) {
      *err = {400, "'prompt' is required", "invalid_request_error", "prompt"};
      return false;
    }
    const OJson* text = it->is_string()                                             ? &*it
                        : it->is_array() && it->size() == 1 && (*it)[0].is_string() ? &(*it)[0]
                                                                                    : nullptr;
    if (text) {
      const std::string& t = text->get_ref<const std::string&>();
      if (!fits_context(t.size(), ctx, "prompt", err)) return false;
      *ids = ctx.tok->encode(t);
    } else if (it->is_array() && !it->empty() && (*it)[0].is_number_integer()) {
      for (const OJson& v : *it) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
            v.get<int64_t>() >= ctx.tok->vocab_size()) {
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
          if (part.is_object() && part.contains("type") && part["type"] == "text" &&
              part.contains("text") && part["text"].is_string()) {
            text += part["text"].get<std::string>();
          }
        }
        msg["content"] = text;
      } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
        *err = {400, "message content must be a string or a list of parts", "invalid_request_error",
                "messages"};
        return false;
      }
      if (!msg.contains("content") || msg["content"].is_null()) msg["content"] = "";
      messages.push_back(msg);
    }
    if (ctx.tmpl == nullptr) {
      *err = {400, "this model has no chat template", "invalid_request_error", "messages"};
      return false;
    }
    OJson extra = OJson::object();
    if (body.contains("tools") && body["tools"].is_array()) extra["tools"] = body["tools"];
    if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object()) {
      for (auto kv = body["chat_template_kwargs"].begin(); kv != body["chat_template_kwargs"].end();
           ++kv) {
        extra[kv.key()] = kv.value();
      }
    }
    auto text = ctx.tmpl->apply(messages, true, extra);
    if (!text.is_ok()) {
      *err = {400, text.status().message(), "invalid_request_error", "messages"};
      return false;
    }
    if (!fits_context(text->size(), ctx, "messages", err)) return false;
    *ids = ctx.tok->encode(*text);
  }
  if (ids->empty()) {
    *err = {400, "the prompt is empty", "invalid_request_error", "prompt"};
    return false;
  }
  return true;
}

}  // namespace

bool parse_request(const OJson& body, bool chat, const ProtocolContext& ctx, ParsedRequest* out,
                   HttpError* err) try {
  std::string model_name;
  if (!get_field(body, "model", &model_name, err)) return false;
  if (!model_name.empty() && model_name != ctx.served_model_name) {
    *err = {404, "The model '" + model_name + "' does not exist", "invalid_request_error", "model"};
    return false;
  }
  if (!prompt_of(body, chat, ctx, &out->prompt, err) ||
      !parse_sampling(body, chat, static_cast<int64_t>(out->prompt.size()), ctx, &out->params,
                      err) ||
      !get_field(body, "stream", &out->stream, err)) {
    return false;
  }
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
    if (!get_field(*so, "include_usage", &out->include_usage, err)) return false;
  }
  // Completions: `logprobs` is the number of alternatives (0..5). Chat: `logprobs` is a
  // switch and `top_logprobs` (0..20) the number of alternatives.
  if (chat) {
    bool want = false;
    int64_t top = 0;
    if (!get_field(body, "logprobs", &want, err) ||
        !get_int_field(body, "top_logprobs", 0, 20, &top, err)) {
      return false;
    }
    if (top > 0 && !want) {
      *err = {400, "'top_logprobs' needs 'logprobs': true", "invalid_request_error",
              "top_logprobs"};
      return false;
    }
    if (want) out->top_logprobs = static_cast<int>(top);
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    int64_t top = 0;
    if (!get_int_field(body, "logprobs", 0, 5, &top, err)) return false;
    out->top_logprobs = static_cast<int>(top);
  }
  return true;
} catch (const OJson::exception& e) {
  // Every field is type-checked before use; this keeps a check that was missed from leaving
  // the parser as an exception.
  *err = {400, std::string("malformed request: ") + e.what()};
  return false;
}

OJson LogprobsJson::entry(int32_t id, float logprob) const {
  const std::string& bytes = tok_.token_bytes(id);
  // A token can end inside a UTF-8 sequence; its text is then repaired for JSON and the
  // exact bytes go in `bytes`.
  OJson e = {{"token", repair_utf8(bytes)}, {"logprob", logprob}};
  OJson b = OJson::array();
  for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
  e["bytes"] = b;
  return e;
}

OJson LogprobsJson::add(const std::vector<TokenLogprob>& lps) {
  if (all_.is_null()) {
    all_ = chat_ ? OJson{{"content", OJson::array()}}
                 : OJson{{"tokens", OJson::array()},
                         {"token_logprobs", OJson::array()},
                         {"top_logprobs", OJson::array()},
                         {"text_offset", OJson::array()}};
  }
  OJson part = chat_ ? OJson{{"content", OJson::array()}}
                     : OJson{{"tokens", OJson::array()},
                             {"token_logprobs", OJson::array()},
                             {"top_logprobs", OJson::array()},
                             {"text_offset", OJson::array()}};
  for (const TokenLogprob& lp : lps) {
    if (chat_) {
      OJson e = entry(lp.token, lp.logprob);
      OJson top = OJson::array();
      for (const auto& [id, l] : lp.top) top.push_back(entry(id, l));
      e["top_logprobs"] = top;
      part["content"].push_back(e);
      all_["content"].push_back(e);
      continue;
    }
    const std::string text = repair_utf8(tok_.token_bytes(lp.token));
    OJson top = OJson::object();
    for (const auto& [id, l] : lp.top) top[repair_utf8(tok_.token_bytes(id))] = l;
    for (OJson* o : {&part, &all_}) {
      (*o)["tokens"].push_back(text);
      (*o)["token_logprobs"].push_back(lp.logprob);
      (*o)["top_logprobs"].push_back(top);
      (*o)["text_offset"].push_back(offset_);
    }
    // Offsets count characters of the text shown, as vLLM's do, not bytes.
    for (unsigned char ch : text) offset_ += (ch & 0xC0) != 0x80 ? 1 : 0;
  }
  return part;
}

}  // namespace mx
