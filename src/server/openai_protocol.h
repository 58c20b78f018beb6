// The OpenAI wire format, apart from HTTP: request bodies to engine requests (with every
// validation error as an OpenAI error object and status), and log-probs to their JSON shapes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampler.h"
#include "text/chat_template.h"
#include "text/grammar.h"
#include "text/tokenizer.h"

namespace mx {

using OJson = nlohmann::ordered_json;

struct HttpError {
  HttpError(int s, std::string m, std::string t = "invalid_request_error", std::string p = "")
      : status(s), message(std::move(m)), type(std::move(t)), param(std::move(p)) {}
  int status;
  std::string message;
  std::string type;
  std::string param;
};

std::string error_body(const HttpError& e);

// What a request is checked against.
struct ProtocolContext {
  const Tokenizer* tok = nullptr;
  const ChatTemplate* tmpl = nullptr;  // null: the model has no chat template
  std::vector<int32_t> stop_ids;
  int64_t context = 0;
  std::string served_model_name;
  // A vision model's image placeholder token; -1: image content parts are refused.
  int64_t image_pad_id = -1;
  int64_t max_images = 0;  // per request
};

// At most this many choices per request (n and best_of), as the issue of shared prompt KV
// bounds them.
constexpr int kMaxChoices = 16;

struct ParsedRequest {
  // Completions take a list of prompts (strings or token lists); chat has one.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;  // each prompt's text (echo; chat: the rendered one)
  SamplingParams params;
  bool stream = false;
  bool include_usage = false;
  int top_logprobs = -1;  // < 0: no log-probs
  int n = 1;              // choices returned per prompt
  int best_of = 1;        // choices generated per prompt; the n most likely are returned
  bool echo = false;      // completions: the prompt's text leads each choice's text
  // vLLM's return_token_ids: the prompt's and each choice's token ids in the reply.
  bool return_token_ids = false;
  // Structured output (response_format, guided_json/regex/choice, structured_outputs).
  std::shared_ptr<const Grammar> grammar;
  OJson tools;        // the request's tools, or null
  OJson tool_choice;  // "auto" (default with tools), "none", "required" or a named function
  bool parallel_tool_calls = true;
  // Chat: the URLs (data: URIs or http(s)) of the image parts, in prompt order; each stands at
  // one image placeholder of prompts[0].
  std::vector<std::string> image_urls;
  // Fields this server does not know, ignored as vLLM ignores them.
  std::vector<std::string> ignored_fields;
};

// Parses a /v1/completions (chat = false) or /v1/chat/completions body; on failure fills
// `err` with the status (400 bad request, 404 unknown model) and message.
bool parse_request(const OJson& body, bool chat, const ProtocolContext& ctx, ParsedRequest* out,
                   HttpError* err);

// vLLM's /tokenize body: a `prompt` string, or `messages` rendered through the chat template.
bool tokenize_request(const OJson& body, const ProtocolContext& ctx, std::vector<int32_t>* ids,
                      HttpError* err);

// Accumulates sampled tokens' log-probs into the completions shape (tokens, token_logprobs,
// top_logprobs, text_offset) or the chat shape (content: [{token, logprob, bytes,
// top_logprobs}]).
class LogprobsJson {
 public:
  LogprobsJson(const Tokenizer& tok, bool chat) : tok_(tok), chat_(chat) {}
  // The JSON for `lps` alone (a stream chunk); text offsets continue across calls.
  OJson add(const std::vector<TokenLogprob>& lps);
  // Everything added so far, as one object.
  const OJson& all() const { return all_; }

 private:
  OJson entry(int32_t id, float logprob) const;
  const Tokenizer& tok_;
  bool chat_;
  int64_t offset_ = 0;
  OJson all_;
};

}  // namespace mx
