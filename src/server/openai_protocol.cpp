#include "server/openai_protocol.h"

#include <algorithm>

#include <cmath>
#include <cstdint>

#include "server/openai_fields.h"

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

// Token ids listed under `key`, each inside the vocabulary.
bool get_token_ids(const OJson& body, const char* key, const ProtocolContext& ctx,
                   std::vector<int32_t>* out, HttpError* err) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return true;
  if (!it->is_array() || it->size() > 1024) {
    *err = {400, std::string("'") + key + "' must be a list of up to 1024 token ids",
            "invalid_request_error", key};
    return false;
  }
  for (const OJson& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
        v.get<int64_t>() >= ctx.tok->vocab_size()) {
      *err = {400,
              std::string("'") + key + "' holds " + v.dump() + ", not a token id of the " +
                  std::to_string(ctx.tok->vocab_size()) + "-token vocabulary",
              "invalid_request_error", key};
      return false;
    }
    out->push_back(v.get<int32_t>());
  }
  return true;
}

// n and best_of: best_of choices are generated and the n most likely returned.
bool parse_choices(const OJson& body, ParsedRequest* out, HttpError* err) {
  int64_t n = 1, best_of = 0;
  if (!get_int_field(body, "n", 1, kMaxChoices, &n, err) ||
      !get_int_field(body, "best_of", 1, kMaxChoices, &best_of, err)) {
    return false;
  }
  if (best_of == 0) best_of = n;
  if (best_of < n) {
    *err = {400,
            "'best_of' (" + std::to_string(best_of) + ") must be at least 'n' (" +
                std::to_string(n) + ")",
            "invalid_request_error", "best_of"};
    return false;
  }
  out->n = static_cast<int>(n);
  out->best_of = static_cast<int>(best_of);
  return true;
}

bool parse_sampling(const OJson& body, bool chat, int64_t prompt_len, const ProtocolContext& ctx,
                    SamplingParams* p, HttpError* err) {
  p->temperature = 1.0f;
  p->top_p = 1.0f;
  int64_t seed = 0, min_tokens = 0;
  if (!get_sampling_field(body, "temperature", &p->temperature, err) ||
      !get_sampling_field(body, "top_p", &p->top_p, err) ||
      !get_sampling_field(body, "top_k", &p->top_k, err) ||
      !get_sampling_field(body, "min_p", &p->min_p, err) ||
      !get_sampling_field(body, "presence_penalty", &p->presence_penalty, err) ||
      !get_sampling_field(body, "frequency_penalty", &p->frequency_penalty, err) ||
      !get_sampling_field(body, "repetition_penalty", &p->repetition_penalty, err) ||
      !get_field(body, "ignore_eos", &p->ignore_eos, err) ||
      !get_field(body, "include_stop_str_in_output", &p->include_stop_str_in_output, err) ||
      !get_field(body, "skip_special_tokens", &p->skip_special_tokens, err) ||
      !get_int_field(body, "seed", INT64_MIN, INT64_MAX, &seed, err) ||
      !get_token_ids(body, "stop_token_ids", ctx, &p->forced_stop_token_ids, err) ||
      !parse_logit_bias(body, ctx, p, err)) {
    return false;
  }
  if (body.contains("seed") && !body["seed"].is_null()) p->seed = static_cast<uint64_t>(seed);
  if (!parse_stop(body, p, err) || !parse_max_tokens(body, chat, prompt_len, ctx, p, err)) {
    return false;
  }
  if (!get_int_field(body, "min_tokens", 0, p->max_tokens, &min_tokens, err)) return false;
  p->min_tokens = static_cast<int>(min_tokens);
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

constexpr size_t kMaxPrompts = 64;

bool encode_text(const OJson& v, const ProtocolContext& ctx, ParsedRequest* out, HttpError* err) {
  const std::string& t = v.get_ref<const std::string&>();
  if (!fits_context(t.size(), ctx, "prompt", err)) return false;
  out->prompts.push_back(ctx.tok->encode(t));
  out->prompt_texts.push_back(t);
  return true;
}

bool token_prompt(const OJson& v, const ProtocolContext& ctx, ParsedRequest* out, HttpError* err) {
  std::vector<int32_t> ids;
  for (const OJson& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() >= ctx.tok->vocab_size()) {
      *err = {400, "'prompt' holds an invalid token id", "invalid_request_error", "prompt"};
      return false;
    }
    ids.push_back(t.get<int32_t>());
  }
  out->prompt_texts.push_back(ctx.tok->decode(ids));
  out->prompts.push_back(std::move(ids));
  return true;
}

// A string, a list of strings, a list of token ids, or a list of token-id lists.
bool completion_prompts(const OJson& body, const ProtocolContext& ctx, ParsedRequest* out,
                        HttpError* err) {
  auto it = body.find("prompt");
  if (it == body.end()) {
    *err = {400, "'prompt' is required", "invalid_request_error", "prompt"};
    return false;
  }
  const char* shape =
      "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of "
      "token ids";
  if (it->is_string()) return encode_text(*it, ctx, out, err);
  if (!it->is_array() || it->empty()) {
    *err = {400, shape, "invalid_request_error", "prompt"};
    return false;
  }
  if ((*it)[0].is_number()) return token_prompt(*it, ctx, out, err);
  if (it->size() > kMaxPrompts) {
    *err = {400, "'prompt' holds more than " + std::to_string(kMaxPrompts) + " prompts",
            "invalid_request_error", "prompt"};
    return false;
  }
  for (const OJson& v : *it) {
    const bool ok = v.is_string() ? encode_text(v, ctx, out, err)
                    : v.is_array() && !v.empty()
                        ? token_prompt(v, ctx, out, err)
                        : (*err = {400, shape, "invalid_request_error", "prompt"}, false);
    if (!ok) return false;
  }
  return true;
}

// The URL of an image content part: OpenAI's {"type":"image_url","image_url":{"url":...}} (or
// the URL as a plain string, as some clients send it), and the Responses API's
// {"type":"input_image","image_url":...}; empty when the part names none.
std::string image_part_url(const OJson& part) {
  for (const char* key : {"image_url", "image"}) {
    auto it = part.find(key);
    if (it == part.end()) continue;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("url") && (*it)["url"].is_string()) {
      return (*it)["url"].get<std::string>();
    }
  }
  return {};
}

// One content part into `parts` (as the template reads it) and its image URL into `images`.
bool content_part(const OJson& part, const ProtocolContext& ctx, OJson* parts,
                  std::vector<std::string>* images, HttpError* err) {
  const std::string type = part.is_object() && part.contains("type") && part["type"].is_string()
                               ? part["type"].get<std::string>()
                               : std::string();
  if (type == "text" && part.contains("text") && part["text"].is_string()) {
    parts->push_back({{"type", "text"}, {"text", part["text"]}});
    return true;
  }
  const bool image = type == "image_url" || type == "image" || type == "input_image";
  if (image && ctx.image_pad_id >= 0) {
    std::string url = image_part_url(part);
    if (url.empty()) {
      *err = {400, "an image content part needs 'image_url': {\"url\": ...}",
              "invalid_request_error", "messages"};
      return false;
    }
    images->push_back(std::move(url));
    // The template sees the part without its payload (a data URI may be megabytes).
    parts->push_back({{"type", "image"}});
    return true;
  }
  // A part that is dropped would be answered as if it had not been sent.
  *err = {400,
          image ? "content parts of type '" + type +
                      "' need a model with a vision tower; this one takes text parts only"
                : "each content part must be an object of type 'text' with a string 'text'"
                  " or, on a vision model, 'image_url' (got " +
                      (type.empty() ? part.dump() : "'" + type + "'") + ")",
          "invalid_request_error", "messages"};
  return false;
}

// A message as the chat template reads it: text parts joined (a message with images keeps its
// parts, which the template turns into vision placeholders), tool-call arguments (JSON text on
// the wire) decoded to objects, as the Qwen templates iterate over them.
bool template_message(const OJson& m, const ProtocolContext& ctx, OJson* msg,
                      std::vector<std::string>* images, HttpError* err) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    *err = {400, "each message needs a string 'role'", "invalid_request_error", "messages"};
    return false;
  }
  *msg = m;
  if (m.contains("content") && m["content"].is_array()) {
    OJson parts = OJson::array();
    const size_t before = images->size();
    for (const OJson& part : m["content"]) {
      if (!content_part(part, ctx, &parts, images, err)) return false;
    }
    std::string text;
    for (const OJson& part : parts) {
      if (part["type"] == "text") text += part["text"].get<std::string>();
    }
    // Text alone is joined, so a text-only request renders as it would on a text model.
    (*msg)["content"] = images->size() == before ? OJson(text) : parts;
  } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
    *err = {400, "message content must be a string or a list of parts", "invalid_request_error",
            "messages"};
    return false;
  }
  if (!msg->contains("content") || (*msg)["content"].is_null()) (*msg)["content"] = "";
  if (auto calls = msg->find("tool_calls"); calls != msg->end() && calls->is_array()) {
    for (OJson& call : *calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        continue;
      OJson& args = call["function"]["arguments"];
      if (!args.is_string()) continue;
      OJson decoded = OJson::parse(args.get<std::string>(), nullptr, false);
      if (!decoded.is_discarded()) args = std::move(decoded);
    }
  }
  return true;
}

// Each image of the request must stand at one placeholder of the rendered prompt, in order.
bool check_image_placeholders(const std::vector<int32_t>& ids, const ProtocolContext& ctx,
                              size_t images, HttpError* err) {
  if (ctx.image_pad_id < 0) return true;
  const auto found = static_cast<size_t>(
      std::count(ids.begin(), ids.end(), static_cast<int32_t>(ctx.image_pad_id)));
  if (found == images) return true;
  *err = {400,
          "the rendered prompt holds " + std::to_string(found) + " image placeholders for " +
              std::to_string(images) +
              " images (the chat template must place each image; text may not hold "
              "<|image_pad|>)",
          "invalid_request_error", "messages"};
  return false;
}

bool chat_prompt(const OJson& body, const ProtocolContext& ctx, ParsedRequest* out,
                 HttpError* err) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) {
    *err = {400, "'messages' must be a non-empty list", "invalid_request_error", "messages"};
    return false;
  }
  OJson messages = OJson::array();
  for (const OJson& m : *it) {
    OJson msg;
    if (!template_message(m, ctx, &msg, &out->image_urls, err)) return false;
    messages.push_back(std::move(msg));
  }
  if (out->image_urls.size() > static_cast<size_t>(ctx.max_images)) {
    *err = {400,
            "the request holds " + std::to_string(out->image_urls.size()) +
                " images; this server takes at most " + std::to_string(ctx.max_images) +
                " per request (--limit-mm-per-prompt)",
            "invalid_request_error", "messages"};
    return false;
  }
  if (ctx.tmpl == nullptr) {
    *err = {400, "this model has no chat template", "invalid_request_error", "messages"};
    return false;
  }
  bool add_generation_prompt = true;
  if (!get_field(body, "add_generation_prompt", &add_generation_prompt, err)) return false;
  OJson extra = OJson::object();
  if (body.contains("tools") && body["tools"].is_array()) extra["tools"] = body["tools"];
  if (body.contains("reasoning_effort") && body["reasoning_effort"].is_string()) {
    extra["reasoning_effort"] = body["reasoning_effort"];
  }
  if (body.contains("chat_template_kwargs") && body["chat_template_kwargs"].is_object()) {
    for (auto kv = body["chat_template_kwargs"].begin(); kv != body["chat_template_kwargs"].end();
         ++kv) {
      extra[kv.key()] = kv.value();
    }
  }
  auto text = ctx.tmpl->apply(messages, add_generation_prompt, extra);
  if (!text.is_ok()) {
    *err = {400, text.status().message(), "invalid_request_error", "messages"};
    return false;
  }
  if (!fits_context(text->size(), ctx, "messages", err)) return false;
  out->prompts.push_back(ctx.tok->encode(*text));
  if (!check_image_placeholders(out->prompts.back(), ctx, out->image_urls.size(), err)) {
    return false;
  }
  out->prompt_texts.push_back(std::move(*text));
  return true;
}

bool prompts_of(const OJson& body, bool chat, const ProtocolContext& ctx, ParsedRequest* out,
                HttpError* err) {
  if (!(chat ? chat_prompt(body, ctx, out, err) : completion_prompts(body, ctx, out, err))) {
    return false;
  }
  for (const std::vector<int32_t>& ids : out->prompts) {
    if (ids.empty()) {
      *err = {400, "the prompt is empty", "invalid_request_error", chat ? "messages" : "prompt"};
      return false;
    }
  }
  return true;
}

bool parse_logprobs(const OJson& body, bool chat, ParsedRequest* out, HttpError* err) {
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
}

// The combinations that are refused: echo needs prompt log-probs for its log-probs, and
// best_of ranks whole outputs, which a stream cannot wait for.
bool check_combinations(const ParsedRequest& r, HttpError* err) {
  if (r.echo && r.top_logprobs >= 0) {
    *err = {400, "'echo' with 'logprobs' (prompt log-probs) is not supported",
            "invalid_request_error", "echo"};
    return false;
  }
  if (r.stream && r.best_of > r.n) {
    *err = {400, "'best_of' greater than 'n' cannot stream", "invalid_request_error", "best_of"};
    return false;
  }
  if (r.prompts.size() * static_cast<size_t>(r.best_of) > 4 * kMaxPrompts) {
    *err = {400,
            "too many sequences: " + std::to_string(r.prompts.size()) + " prompts times " +
                std::to_string(r.best_of) + " choices (at most " + std::to_string(4 * kMaxPrompts) +
                ")",
            "invalid_request_error", "best_of"};
    return false;
  }
  return true;
}

}  // namespace

bool parse_request(const OJson& body, bool chat, const ProtocolContext& ctx, ParsedRequest* out,
                   HttpError* err) try {
  if (!check_fields(body, chat, &out->ignored_fields, err)) return false;
  std::string model_name;
  if (!get_field(body, "model", &model_name, err)) return false;
  if (!model_name.empty() && model_name != ctx.served_model_name) {
    *err = {404, "The model '" + model_name + "' does not exist", "invalid_request_error", "model"};
    return false;
  }
  if (!prompts_of(body, chat, ctx, out, err)) return false;
  size_t longest = 0;
  for (const auto& p : out->prompts) longest = std::max(longest, p.size());
  if (!parse_sampling(body, chat, static_cast<int64_t>(longest), ctx, &out->params, err) ||
      !get_field(body, "stream", &out->stream, err) || !parse_choices(body, out, err) ||
      !get_field(body, "echo", &out->echo, err) || !parse_logprobs(body, chat, out, err) ||
      !get_field(body, "return_token_ids", &out->return_token_ids, err) ||
      !parse_structured_output(body, &out->grammar, err) || !parse_tools(body, out, err)) {
    return false;
  }
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
    if (!get_field(*so, "include_usage", &out->include_usage, err)) return false;
  }
  return check_combinations(*out, err);
} catch (const OJson::exception& e) {
  // Every field is type-checked before use; this keeps a check that was missed from leaving
  // the parser as an exception.
  *err = {400, std::string("malformed request: ") + e.what()};
  return false;
}

bool tokenize_request(const OJson& body, const ProtocolContext& ctx, std::vector<int32_t>* ids,
                      HttpError* err) try {
  ParsedRequest r;
  const bool chat = body.contains("messages");
  if (!chat && body.contains("prompt") && !body["prompt"].is_string()) {
    *err = {400, "'prompt' must be a string", "invalid_request_error", "prompt"};
    return false;
  }
  if (!prompts_of(body, chat, ctx, &r, err)) return false;
  *ids = std::move(r.prompts[0]);
  return true;
} catch (const OJson::exception& e) {
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
    // Tokens that are parts of one character all show as U+FFFD: the dict keeps the likeliest
    // of them (lp.top is most likely first), so its best entry stays the best alternative.
    for (const auto& [id, l] : lp.top) top.emplace(repair_utf8(tok_.token_bytes(id)), l);
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
