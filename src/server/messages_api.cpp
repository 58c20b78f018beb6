// The Anthropic Messages API on the chat path. Requests: system (a string or text blocks),
// messages of text, thinking, tool_use and tool_result blocks, tools with input_schema,
// tool_choice auto / any / tool / none (disable_parallel_tool_use), stop_sequences, thinking.
// Replies: a message of thinking, text and tool_use blocks with stop_reason end_turn,
// max_tokens, stop_sequence or tool_use; streamed as message_start, content_block_start /
// _delta / _stop, message_delta and message_stop.
#include <string>

#include "server/chat_translate.h"

namespace mx {
namespace {

// The text of a string or a list of text blocks.
Result<std::string> block_text(const OJson& content, const std::string& field) {
  return joined_text(content, field, {"text"}, {"image", "document"});
}

// An image block's source: base64 data with its media type, or a URL.
Result<std::string> image_block_url(const OJson& block) {
  const OJson src = block.value("source", OJson::object());
  const std::string kind = src.is_object() ? src.value("type", "") : "";
  if (kind == "base64" && src.contains("data") && src["data"].is_string() &&
      src.contains("media_type") && src["media_type"].is_string()) {
    return "data:" + src["media_type"].get<std::string>() + ";base64," +
           src["data"].get<std::string>();
  }
  if (kind == "url" && src.contains("url") && src["url"].is_string()) {
    return src["url"].get<std::string>();
  }
  return invalid_argument(
      "an image block needs a source of type base64 (media_type, data) or url (url)");
}

Status user_blocks(const OJson& content, const std::string& field, OJson* chat) {
  if (content.is_string()) {
    chat->push_back({{"role", "user"}, {"content", content}});
    return Status::ok();
  }
  OJson parts = OJson::array();
  bool images = false;
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const OJson& b = content[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      text += b["text"].get<std::string>();
      parts.push_back({{"type", "text"}, {"text", b["text"]}});
    } else if (type == "tool_result") {
      MX_ASSIGN_OR_RETURN(OJson m, tool_result_message(b, "tool_use_id", "content", at, {"text"},
                                                       {"image", "document"}));
      chat->push_back(std::move(m));
    } else if (type == "image") {
      auto url = image_block_url(b);
      if (!url.is_ok()) return translate_error(at, url.status().message());
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", *url}}}});
      images = true;
    } else if (type == "document") {
      return translate_error(at, "'document' blocks are not supported by this model");
    } else {
      return translate_error(at, "unknown or malformed block type '" + type + "'");
    }
  }
  // Images keep the turn's parts in order for the chat template; text alone is joined.
  if (images) {
    chat->push_back({{"role", "user"}, {"content", parts}});
  } else if (!text.empty()) {
    chat->push_back({{"role", "user"}, {"content", text}});
  }
  return Status::ok();
}

Status assistant_blocks(const OJson& content, const std::string& field, OJson* chat) {
  OJson m = {{"role", "assistant"}, {"content", ""}};
  if (content.is_string()) {
    m["content"] = content;
    chat->push_back(std::move(m));
    return Status::ok();
  }
  std::string text, thinking;
  OJson calls = OJson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const OJson& b = content[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text" && b.contains("text") && b["text"].is_string()) {
      text += b["text"].get<std::string>();
    } else if (type == "thinking" && b.contains("thinking") && b["thinking"].is_string()) {
      thinking += b["thinking"].get<std::string>();
    } else if (type == "redacted_thinking") {
      continue;
    } else if (type == "tool_use") {
      if (!b.contains("name") || !b["name"].is_string() || !b.contains("input") ||
          !b["input"].is_object()) {
        return translate_error(at, "a tool_use block needs a string 'name' and an object 'input'");
      }
      calls.push_back({{"id", b.value("id", random_id("toolu_"))},
                       {"type", "function"},
                       {"function", {{"name", b["name"]}, {"arguments", b["input"].dump()}}}});
    } else {
      return translate_error(at, "unknown or malformed block type '" + type + "'");
    }
  }
  m["content"] = text;
  if (!thinking.empty()) m["reasoning_content"] = thinking;
  if (!calls.empty()) m["tool_calls"] = std::move(calls);
  chat->push_back(std::move(m));
  return Status::ok();
}

Result<OJson> translate_tools(const OJson& tools) {
  return chat_tools(tools, "input_schema", [](const OJson& t, const std::string& at) {
    if (t.contains("type") && t["type"] != "custom") {
      return translate_error(at + ".type", "server tools ('" + t["type"].dump() +
                                               "') are not supported; give name and input_schema");
    }
    return Status::ok();
  });
}

Status translate_tool_choice(const OJson& tc, OJson* chat) {
  const std::string type = tc.is_object() ? tc.value("type", "") : "";
  if (type == "auto") {
    (*chat)["tool_choice"] = "auto";
  } else if (type == "any") {
    (*chat)["tool_choice"] = "required";
  } else if (type == "none") {
    (*chat)["tool_choice"] = "none";
  } else if (type == "tool" && tc.contains("name") && tc["name"].is_string()) {
    (*chat)["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  } else {
    return translate_error("tool_choice",
                           "must be {\"type\": auto, any, none, or tool with a name}");
  }
  if (tc.value("disable_parallel_tool_use", false)) (*chat)["parallel_tool_calls"] = false;
  return Status::ok();
}

Status translate_messages(const OJson& body, OJson* chat) {
  OJson msgs = OJson::array();
  if (body.contains("system")) {
    MX_ASSIGN_OR_RETURN(const std::string sys, block_text(body["system"], "system"));
    msgs.push_back({{"role", "system"}, {"content", sys}});
  }
  if (!body.contains("messages") || !body["messages"].is_array()) {
    return translate_error("messages", "a list of messages is required");
  }
  for (size_t i = 0; i < body["messages"].size(); ++i) {
    const OJson& m = body["messages"][i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("content") ||
        !(m["content"].is_string() || m["content"].is_array())) {
      return translate_error(at + ".content", "must be a string or a list of blocks");
    }
    const std::string role = m.value("role", "");
    if (role == "user") {
      MX_RETURN_IF_ERROR(user_blocks(m["content"], at + ".content", &msgs));
    } else if (role == "assistant") {
      MX_RETURN_IF_ERROR(assistant_blocks(m["content"], at + ".content", &msgs));
    } else {
      return translate_error(at + ".role", "must be user or assistant");
    }
  }
  (*chat)["messages"] = std::move(msgs);
  return Status::ok();
}

std::string stop_reason_of(const std::string& finish, const OJson& stop) {
  if (finish == "length") return "max_tokens";
  if (finish == "tool_calls") return "tool_use";
  return stop.is_string() ? "stop_sequence" : "end_turn";
}

std::string error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

OJson error_json(int status, const std::string& message) {
  return {{"type", "error"}, {"error", {{"type", error_type(status)}, {"message", message}}}};
}

std::string message_of(const OJson& chat_error) {
  if (chat_error.contains("error") && chat_error["error"].is_object()) {
    return chat_error["error"].value("message", "error");
  }
  return "error";
}

class MessagesTranslator : public ChatTranslator {
 public:
  explicit MessagesTranslator(std::string model) : model_(std::move(model)) {}

  HttpReply whole(int status, const OJson& body) override {
    if (status != 200 || body.contains("error")) {
      return {status == 200 ? 500 : status, "application/json",
              error_json(status, message_of(body)).dump()};
    }
    const OJson& choice = body["choices"][0];
    const OJson& m = choice["message"];
    OJson content = OJson::array();
    if (m.contains("reasoning_content") && m["reasoning_content"].is_string()) {
      content.push_back(
          {{"type", "thinking"}, {"thinking", m["reasoning_content"]}, {"signature", ""}});
    }
    if (m.contains("content") && m["content"].is_string() &&
        !m["content"].get<std::string>().empty()) {
      content.push_back({{"type", "text"}, {"text", m["content"]}});
    }
    if (m.contains("tool_calls")) {
      for (const OJson& c : m["tool_calls"]) {
        OJson input = OJson::parse(c["function"]["arguments"].get<std::string>(), nullptr, false);
        if (input.is_discarded()) input = OJson::object();
        content.push_back({{"type", "tool_use"},
                           {"id", c["id"]},
                           {"name", c["function"]["name"]},
                           {"input", input}});
      }
    }
    const OJson stop = choice.value("stop_reason", OJson());
    OJson msg = start_message();
    msg["content"] = std::move(content);
    msg["stop_reason"] = stop_reason_of(choice.value("finish_reason", "stop"), stop);
    msg["stop_sequence"] = stop.is_string() ? stop : OJson();
    msg["usage"] = {{"input_tokens", body["usage"]["prompt_tokens"]},
                    {"output_tokens", body["usage"]["completion_tokens"]}};
    return {200, "application/json", msg.dump()};
  }

  std::string chunk(const OJson& c) override {
    std::string out;
    if (c.contains("error")) {
      errored_ = true;
      return sse_event("error", error_json(c["error"].value("code", 500), message_of(c)));
    }
    if (!started_) {
      started_ = true;
      out += sse_event("message_start", {{"type", "message_start"}, {"message", start_message()}});
    }
    if (c.contains("usage") && c["usage"].is_object()) usage_ = c["usage"];
    if (!c.contains("choices") || c["choices"].empty()) return out;
    const OJson& ch = c["choices"][0];
    const OJson& d = ch["delta"];
    if (d.contains("reasoning_content") && d["reasoning_content"].is_string()) {
      out += open("thinking", {{"type", "thinking"}, {"thinking", ""}});
      out += delta({{"type", "thinking_delta"}, {"thinking", d["reasoning_content"]}});
    }
    if (d.contains("content") && d["content"].is_string() &&
        !d["content"].get<std::string>().empty()) {
      out += open("text", {{"type", "text"}, {"text", ""}});
      out += delta({{"type", "text_delta"}, {"text", d["content"]}});
    }
    if (d.contains("tool_calls")) {
      for (const OJson& t : d["tool_calls"]) out += tool_piece(t);
    }
    if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) {
      finish_ = ch["finish_reason"].get<std::string>();
      stop_ = ch.value("stop_reason", OJson());
    }
    return out;
  }

  std::string done() override {
    if (errored_) return "";
    std::string out = close();
    OJson usage = {{"input_tokens", usage_.value("prompt_tokens", 0)},
                   {"output_tokens", usage_.value("completion_tokens", 0)}};
    out += sse_event("message_delta", {{"type", "message_delta"},
                                       {"delta",
                                        {{"stop_reason", stop_reason_of(finish_, stop_)},
                                         {"stop_sequence", stop_.is_string() ? stop_ : OJson()}}},
                                       {"usage", usage}});
    out += sse_event("message_stop", {{"type", "message_stop"}});
    return out;
  }

 private:
  OJson start_message() {
    return {{"id", id_},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model_},
            {"content", OJson::array()},
            {"stop_reason", nullptr},
            {"stop_sequence", nullptr},
            {"usage", {{"input_tokens", 0}, {"output_tokens", 0}}}};
  }

  std::string open(const std::string& kind, const OJson& block) {
    if (block_ == kind) return "";
    std::string out = close();
    block_ = kind;
    out +=
        sse_event("content_block_start",
                  {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
    return out;
  }

  std::string close() {
    if (block_.empty()) return "";
    block_.clear();
    return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
  }

  std::string delta(const OJson& d) {
    return sse_event("content_block_delta",
                     {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }

  std::string tool_piece(const OJson& t) {
    std::string out;
    const OJson& fn = t.value("function", OJson::object());
    if (t.contains("id")) {
      out += close();
      block_ = "tool_use";
      out += sse_event("content_block_start", {{"type", "content_block_start"},
                                               {"index", index_},
                                               {"content_block",
                                                {{"type", "tool_use"},
                                                 {"id", t["id"]},
                                                 {"name", fn.value("name", "")},
                                                 {"input", OJson::object()}}}});
    }
    const std::string args = fn.value("arguments", "");
    if (!args.empty()) out += delta({{"type", "input_json_delta"}, {"partial_json", args}});
    return out;
  }

  std::string model_;
  std::string id_ = random_id("msg_");
  bool started_ = false, errored_ = false;
  std::string block_;  // the open content block's kind
  int index_ = 0;
  std::string finish_ = "stop";
  OJson stop_, usage_ = OJson::object();
};

}  // namespace

Result<OJson> messages_to_chat(const OJson& body) {
  OJson chat = OJson::object();
  if (!body.contains("model") || !body["model"].is_string()) {
    return translate_error("model", "a string is required");
  }
  chat["model"] = body["model"];
  if (!body.contains("max_tokens") || !body["max_tokens"].is_number_integer()) {
    return translate_error("max_tokens", "an integer is required");
  }
  chat["max_tokens"] = body["max_tokens"];
  MX_RETURN_IF_ERROR(translate_messages(body, &chat));
  for (const char* k : {"temperature", "top_p", "top_k"}) {
    if (body.contains(k)) chat[k] = body[k];
  }
  if (body.contains("stop_sequences")) chat["stop"] = body["stop_sequences"];
  if (body.contains("tools")) {
    MX_ASSIGN_OR_RETURN(chat["tools"], translate_tools(body["tools"]));
  }
  if (body.contains("tool_choice")) {
    MX_RETURN_IF_ERROR(translate_tool_choice(body["tool_choice"], &chat));
  }
  // Anthropic's models think only when asked to.
  const bool thinking = body.contains("thinking") && body["thinking"].is_object() &&
                        body["thinking"].value("type", "") == "enabled";
  chat["chat_template_kwargs"] = {{"enable_thinking", thinking}};
  if (body.value("stream", false)) {
    chat["stream"] = true;
    chat["stream_options"] = {{"include_usage", true}};
  }
  return chat;
}

std::shared_ptr<ChatTranslator> messages_translator(std::string model) {
  return std::make_shared<MessagesTranslator>(std::move(model));
}

HttpReply messages_error(const HttpError& e) {
  return {e.status, "application/json", error_json(e.status, e.message).dump()};
}

}  // namespace mx
