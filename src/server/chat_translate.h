// Protocols served through the chat completions path: the Anthropic Messages API and the
// OpenAI Responses API. Each turns its request into a chat request, and the chat replies (a
// JSON object, or server-sent chat.completion.chunk events) back into its own shapes, through
// an exchange that sits between the chat job and the client. So tool calls, reasoning,
// structured output and streaming behave alike on every API.
#pragma once

#include <chrono>
#include <functional>
#include <initializer_list>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "server/http_server.h"
#include "server/openai_protocol.h"

namespace mx {

// A prefix and 32 random hex digits (a UUID4's worth of randomness), as vLLM names requests.
std::string random_id(const char* prefix);

class ChatTranslator {
 public:
  virtual ~ChatTranslator() = default;
  // A reply that was not streamed (or an error before any stream began): its status and body.
  virtual HttpReply whole(int status, const OJson& body) = 0;
  // One streamed chat chunk (or an error object the chat stream carries) as this protocol's
  // server-sent events.
  virtual std::string chunk(const OJson& c) = 0;
  // What follows the chat stream's end ([DONE]).
  virtual std::string done() = 0;
};

// An exchange that hands the chat job's output to `t` and what `t` makes of it to `inner`.
std::shared_ptr<HttpExchange> translating_exchange(std::shared_ptr<HttpExchange> inner,
                                                   std::shared_ptr<ChatTranslator> t);

// A request the translation refuses: "FIELD: why", the field first, as both APIs report it.
inline Status translate_error(const std::string& field, const std::string& why) {
  return invalid_argument(field + ": " + why);
}

// The text of a string, or of a list of parts whose type is one of `text_types` (their
// "text" fields joined); a part of a `refused` type is named as unsupported, any other as
// unknown.
Result<std::string> joined_text(const OJson& content, const std::string& field,
                                std::initializer_list<std::string_view> text_types,
                                std::initializer_list<std::string_view> refused);

// A user turn's content as chat reads it: the joined text, or, when it holds images, chat's
// parts ({"type": "text"} and {"type": "image_url"} with the URL `image_url` gives for a part
// of type `image_type`; an empty URL refuses the part).
Result<OJson> content_with_images(const OJson& content, const std::string& field,
                                  std::initializer_list<std::string_view> text_types,
                                  std::string_view image_type,
                                  const std::function<Result<std::string>(const OJson&)>& image_url,
                                  std::initializer_list<std::string_view> refused);

// A tool result as a chat "tool" message: `item[id_key]` (a string) names the call it answers,
// `item[content_key]` (optional) is read by joined_text with the given part types.
Result<OJson> tool_result_message(const OJson& item, const char* id_key, const char* content_key,
                                  const std::string& at,
                                  std::initializer_list<std::string_view> text_types,
                                  std::initializer_list<std::string_view> refused);

// A list of tools as chat function tools: each entry is an object that `check_type` accepts,
// with a string "name", an optional "description" and its parameters' schema under
// `params_key` ({"type": "object"} when absent).
Result<OJson> chat_tools(const OJson& tools, const char* params_key,
                         const std::function<Status(const OJson&, const std::string&)>& check_type);

// One server-sent event with an event name (both APIs name theirs).
std::string sse_event(const std::string& name, const OJson& data);

// Stored conversations for the Responses API's previous_response_id: the chat messages up to
// and including a response's output, kept in memory, at most `capacity` of them, each for
// `ttl`; the oldest goes first.
class ResponseStore {
 public:
  ResponseStore(size_t capacity, std::chrono::seconds ttl) : capacity_(capacity), ttl_(ttl) {}
  void put(const std::string& id, OJson messages);
  std::optional<OJson> get(const std::string& id);

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::string id;
    OJson messages;
    Clock::time_point at;
  };
  void expire(Clock::time_point now);
  size_t capacity_;
  std::chrono::seconds ttl_;
  std::mutex mu_;
  std::list<Entry> order_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

// The Anthropic Messages API (/v1/messages): the request as a chat request, or the error that
// refuses it (the field named); and the translator of its replies.
Result<OJson> messages_to_chat(const OJson& body);
std::shared_ptr<ChatTranslator> messages_translator(std::string model);
// An error in the Messages API's shape.
HttpReply messages_error(const HttpError& e);

// The OpenAI Responses API (/v1/responses).
struct ResponsesRequest {
  OJson chat;     // the chat request
  OJson history;  // the chat messages to store with the reply (without instructions)
  OJson echo;     // the request fields a response object repeats
  bool store = true;
};
Result<ResponsesRequest> responses_to_chat(const OJson& body, ResponseStore& store);
std::shared_ptr<ChatTranslator> responses_translator(ResponsesRequest req, ResponseStore& store);

}  // namespace mx
