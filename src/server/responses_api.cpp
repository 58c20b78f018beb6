// The OpenAI Responses API on the chat path. Requests: input as a string or items (messages
// with input_text / output_text parts, function_call and function_call_output), instructions,
// function tools and tool_choice, text.format (json_schema, json_object), max_output_tokens,
// previous_response_id (from the server's ResponseStore). Replies: a response object whose
// output holds reasoning, message and function_call items; streamed as typed events
// (response.created, response.output_item.added, response.output_text.delta,
// response.function_call_arguments.delta, ..., response.completed).
#include <string>

#include "server/chat_translate.h"

namespace mx {
namespace {

// input_image: {"image_url": "data:..."}; files by id are not kept here.
Result<std::string> input_image_url(const OJson& part) {
  if (part.contains("image_url") && part["image_url"].is_string()) {
    return part["image_url"].get<std::string>();
  }
  return invalid_argument("an input_image needs a string 'image_url' (file_id is not supported)");
}

// A function_call item joins the assistant message just before it, as chat writes calls.
void add_call(const OJson& item, OJson* msgs) {
  const OJson call = {{"id", item.value("call_id", item.value("id", random_id("call_")))},
                      {"type", "function"},
                      {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}};
  if (!msgs->empty() && msgs->back()["role"] == "assistant") {
    OJson& last = msgs->back();
    if (!last.contains("tool_calls")) last["tool_calls"] = OJson::array();
    last["tool_calls"].push_back(call);
    return;
  }
  msgs->push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", OJson::array({call})}});
}

Status input_item(const OJson& item, const std::string& at, OJson* msgs) {
  if (!item.is_object()) return translate_error(at, "must be an object");
  const std::string type = item.value("type", "message");
  if (type == "message") {
    const std::string role = item.value("role", "");
    if (role != "user" && role != "assistant" && role != "system" && role != "developer") {
      return translate_error(at + ".role", "must be user, assistant, system or developer");
    }
    if (!item.contains("content")) return translate_error(at + ".content", "is required");
    MX_ASSIGN_OR_RETURN(
        OJson content,
        content_with_images(item["content"], at + ".content", {"input_text", "output_text", "text"},
                            "input_image", input_image_url, {"input_file", "input_audio"}));
    msgs->push_back({{"role", role == "developer" ? "system" : role}, {"content", content}});
  } else if (type == "function_call") {
    if (!item.contains("name") || !item["name"].is_string() || !item.contains("arguments") ||
        !item["arguments"].is_string()) {
      return translate_error(at, "a function_call needs a string 'name' and string 'arguments'");
    }
    add_call(item, msgs);
  } else if (type == "function_call_output") {
    MX_ASSIGN_OR_RETURN(OJson m, tool_result_message(item, "call_id", "output", at,
                                                     {"input_text", "output_text", "text"},
                                                     {"input_image", "input_file", "input_audio"}));
    msgs->push_back(std::move(m));
  } else if (type == "reasoning") {
    return Status::ok();  // the model's own earlier thoughts; templates drop them
  } else {
    return translate_error(at + ".type", "item type '" + type + "' is not supported");
  }
  return Status::ok();
}

Result<OJson> translate_tools(const OJson& tools) {
  return chat_tools(tools, "parameters", [](const OJson& t, const std::string& at) {
    if (t.value("type", "") != "function") {
      return translate_error(at + ".type", "only function tools are supported");
    }
    return Status::ok();
  });
}

Result<OJson> translate_tool_choice(const OJson& tc) {
  if (tc.is_string()) return tc;
  if (tc.is_object() && tc.value("type", "") == "function" && tc.contains("name")) {
    return OJson{{"type", "function"}, {"function", {{"name", tc["name"]}}}};
  }
  return translate_error("tool_choice", "must be none, auto, required or {type: function, name}");
}

Result<OJson> translate_format(const OJson& text) {
  if (!text.is_object() || !text.contains("format")) return OJson();
  const OJson& f = text["format"];
  const std::string type = f.is_object() ? f.value("type", "") : "";
  if (type == "text") return OJson();
  if (type == "json_object") return OJson{{"type", "json_object"}};
  if (type == "json_schema" && f.contains("schema")) {
    OJson js = {{"name", f.value("name", "response")}, {"schema", f["schema"]}};
    if (f.contains("strict")) js["strict"] = f["strict"];
    return OJson{{"type", "json_schema"}, {"json_schema", std::move(js)}};
  }
  return translate_error("text.format",
                         "must be {type: text, json_object, or json_schema with schema}");
}

Status translate_input(const OJson& body, ResponseStore& store, OJson* history) {
  if (body.contains("previous_response_id") && !body["previous_response_id"].is_null()) {
    const OJson& prev = body["previous_response_id"];
    std::optional<OJson> old;
    if (prev.is_string()) old = store.get(prev.get<std::string>());
    if (!old) {
      return translate_error("previous_response_id",
                             "no stored response " + prev.dump() + " (expired or never stored)");
    }
    *history = std::move(*old);
  }
  if (!body.contains("input")) return translate_error("input", "is required");
  const OJson& input = body["input"];
  if (input.is_string()) {
    history->push_back({{"role", "user"}, {"content", input}});
  } else if (input.is_array()) {
    for (size_t i = 0; i < input.size(); ++i) {
      MX_RETURN_IF_ERROR(input_item(input[i], "input[" + std::to_string(i) + "]", history));
    }
  } else {
    return translate_error("input", "must be a string or a list of items");
  }
  return Status::ok();
}

class ResponsesTranslator : public ChatTranslator {
 public:
  ResponsesTranslator(ResponsesRequest req, ResponseStore& store)
      : req_(std::move(req)), store_(store) {}

  HttpReply whole(int status, const OJson& body) override {
    if (status != 200 || body.contains("error")) {
      return {status == 200 ? 500 : status, "application/json", body.dump()};
    }
    const OJson& choice = body["choices"][0];
    const OJson& m = choice["message"];
    if (m.contains("reasoning_content") && m["reasoning_content"].is_string()) {
      output_.push_back(reasoning_item(m["reasoning_content"]));
    }
    if (m.contains("content") && m["content"].is_string() &&
        !m["content"].get<std::string>().empty()) {
      output_.push_back(message_item(random_id("msg_"), m["content"], "completed"));
    }
    if (m.contains("tool_calls")) {
      for (const OJson& c : m["tool_calls"]) {
        output_.push_back(call_item(random_id("fc_"), c["id"], c["function"]["name"],
                                    c["function"]["arguments"], "completed"));
      }
    }
    finish_ = choice.value("finish_reason", "stop");
    usage_ = body["usage"];
    return {200, "application/json", final_response().dump()};
  }

  std::string chunk(const OJson& c) override {
    std::string out;
    if (c.contains("error")) {
      errored_ = true;
      const OJson e = c["error"];
      return event("error", {{"code", e.value("type", "server_error")},
                             {"message", e.value("message", "")},
                             {"param", e.value("param", OJson())}});
    }
    if (!started_) {
      started_ = true;
      OJson r = response_object("in_progress");
      out += event("response.created", {{"response", r}});
      out += event("response.in_progress", {{"response", r}});
    }
    if (c.contains("usage") && c["usage"].is_object()) usage_ = c["usage"];
    if (!c.contains("choices") || c["choices"].empty()) return out;
    const OJson& ch = c["choices"][0];
    const OJson& d = ch["delta"];
    if (d.contains("reasoning_content") && d["reasoning_content"].is_string()) {
      out += text_delta("reasoning", d["reasoning_content"].get<std::string>());
    }
    if (d.contains("content") && d["content"].is_string() &&
        !d["content"].get<std::string>().empty()) {
      out += text_delta("message", d["content"].get<std::string>());
    }
    if (d.contains("tool_calls")) {
      for (const OJson& t : d["tool_calls"]) out += call_piece(t);
    }
    if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) {
      finish_ = ch["finish_reason"].get<std::string>();
    }
    return out;
  }

  std::string done() override {
    if (errored_) return "";
    std::string out = close_item();
    const OJson r = final_response();
    const bool complete = r["status"] == "completed";
    out += event(complete ? "response.completed" : "response.incomplete", {{"response", r}});
    return out;
  }

 private:
  std::string event(const std::string& type, OJson data) {
    OJson e = {{"type", type}, {"sequence_number", seq_++}};
    e.update(data);
    return sse_event(type, e);
  }

  OJson reasoning_item(const OJson& text) {
    return {{"type", "reasoning"},
            {"id", random_id("rs_")},
            {"summary", OJson::array()},
            {"content", OJson::array({{{"type", "reasoning_text"}, {"text", text}}})}};
  }
  static OJson message_item(const std::string& id, const OJson& text, const char* status) {
    OJson content = OJson::array();
    if (!text.is_null()) {
      content.push_back({{"type", "output_text"}, {"text", text}, {"annotations", OJson::array()}});
    }
    return {{"type", "message"},
            {"id", id},
            {"status", status},
            {"role", "assistant"},
            {"content", content}};
  }
  static OJson call_item(const std::string& id, const OJson& call_id, const OJson& name,
                         const OJson& args, const char* status) {
    return {{"type", "function_call"}, {"id", id},        {"call_id", call_id}, {"name", name},
            {"arguments", args},       {"status", status}};
  }

  // Reasoning or message text: opens its item (closing another kind) and sends the delta.
  std::string text_delta(const std::string& kind, const std::string& text) {
    std::string out;
    const int idx = static_cast<int>(output_.size());
    if (open_ != kind) {
      out += close_item();
      open_ = kind;
      item_id_ = random_id(kind == "message" ? "msg_" : "rs_");
      text_.clear();
      if (kind == "message") {
        out += event(
            "response.output_item.added",
            {{"output_index", idx}, {"item", message_item(item_id_, OJson(), "in_progress")}});
        out += event("response.content_part.added", {{"item_id", item_id_},
                                                     {"output_index", idx},
                                                     {"content_index", 0},
                                                     {"part", text_part("")}});
      } else {
        out += event(
            "response.output_item.added",
            {{"output_index", idx},
             {"item", {{"type", "reasoning"}, {"id", item_id_}, {"summary", OJson::array()}}}});
      }
    }
    text_ += text;
    const char* type =
        kind == "message" ? "response.output_text.delta" : "response.reasoning_text.delta";
    OJson data = {
        {"item_id", item_id_}, {"output_index", idx}, {"content_index", 0}, {"delta", text}};
    if (kind == "message") data["logprobs"] = OJson::array();
    out += event(type, data);
    return out;
  }

  static OJson text_part(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", OJson::array()}};
  }

  std::string call_piece(const OJson& t) {
    std::string out;
    const OJson& fn = t.value("function", OJson::object());
    const int idx = static_cast<int>(output_.size());
    if (t.contains("id")) {
      out += close_item();
      open_ = "function_call";
      item_id_ = random_id("fc_");
      call_id_ = t["id"];
      call_name_ = fn.value("name", "");
      text_.clear();
      out += event("response.output_item.added",
                   {{"output_index", idx},
                    {"item", call_item(item_id_, call_id_, call_name_, "", "in_progress")}});
    }
    const std::string args = fn.value("arguments", "");
    if (!args.empty() && open_ == "function_call") {
      text_ += args;
      out += event("response.function_call_arguments.delta",
                   {{"item_id", item_id_}, {"output_index", idx}, {"delta", args}});
    }
    return out;
  }

  std::string close_item() {
    if (open_.empty()) return "";
    std::string out;
    const int idx = static_cast<int>(output_.size());
    OJson item;
    if (open_ == "message") {
      out += event("response.output_text.done", {{"item_id", item_id_},
                                                 {"output_index", idx},
                                                 {"content_index", 0},
                                                 {"text", text_},
                                                 {"logprobs", OJson::array()}});
      out += event("response.content_part.done", {{"item_id", item_id_},
                                                  {"output_index", idx},
                                                  {"content_index", 0},
                                                  {"part", text_part(text_)}});
      item = message_item(item_id_, text_, "completed");
    } else if (open_ == "reasoning") {
      out += event(
          "response.reasoning_text.done",
          {{"item_id", item_id_}, {"output_index", idx}, {"content_index", 0}, {"text", text_}});
      item = reasoning_item(text_);
      item["id"] = item_id_;
    } else {
      out += event("response.function_call_arguments.done", {{"item_id", item_id_},
                                                             {"output_index", idx},
                                                             {"name", call_name_},
                                                             {"arguments", text_}});
      item = call_item(item_id_, call_id_, call_name_, text_, "completed");
    }
    out += event("response.output_item.done", {{"output_index", idx}, {"item", item}});
    output_.push_back(std::move(item));
    open_.clear();
    return out;
  }

  OJson response_object(const char* status) const {
    OJson r = {{"id", id_},
               {"object", "response"},
               {"created_at", created_},
               {"status", status},
               {"error", nullptr},
               {"incomplete_details", nullptr},
               {"output", OJson::array()},
               {"usage", nullptr}};
    r.update(req_.echo);
    return r;
  }

  OJson final_response() {
    const bool cut = finish_ == "length";
    OJson r = response_object(cut ? "incomplete" : "completed");
    if (cut) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    r["output"] = output_;
    const int64_t in = usage_.value("prompt_tokens", int64_t{0});
    const int64_t out = usage_.value("completion_tokens", int64_t{0});
    r["usage"] = {{"input_tokens", in},
                  {"input_tokens_details", {{"cached_tokens", 0}}},
                  {"output_tokens", out},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", in + out}};
    if (req_.store) store_.put(id_, history_with_output());
    return r;
  }

  // The conversation through this response, as the next request's previous_response_id
  // continues it.
  OJson history_with_output() const {
    OJson msgs = req_.history;
    OJson reply = {{"role", "assistant"}, {"content", ""}};
    for (const OJson& item : output_) {
      if (item["type"] == "message") {
        for (const OJson& p : item["content"]) {
          reply["content"] = reply["content"].get<std::string>() + p["text"].get<std::string>();
        }
      } else if (item["type"] == "function_call") {
        if (!reply.contains("tool_calls")) reply["tool_calls"] = OJson::array();
        reply["tool_calls"].push_back(
            {{"id", item["call_id"]},
             {"type", "function"},
             {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
      }
    }
    msgs.push_back(std::move(reply));
    return msgs;
  }

  ResponsesRequest req_;
  ResponseStore& store_;
  std::string id_ = random_id("resp_");
  int64_t created_ = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  bool started_ = false, errored_ = false;
  int64_t seq_ = 0;
  OJson output_ = OJson::array();
  std::string open_, item_id_, text_, call_name_;
  OJson call_id_;
  std::string finish_ = "stop";
  OJson usage_ = OJson::object();
};

}  // namespace

Result<ResponsesRequest> responses_to_chat(const OJson& body, ResponseStore& store) {
  ResponsesRequest r;
  if (!body.contains("model") || !body["model"].is_string()) {
    return translate_error("model", "a string is required");
  }
  OJson history = OJson::array();
  MX_RETURN_IF_ERROR(translate_input(body, store, &history));
  OJson msgs = OJson::array();
  if (body.contains("instructions") && body["instructions"].is_string()) {
    msgs.push_back({{"role", "system"}, {"content", body["instructions"]}});
  } else if (body.contains("instructions") && !body["instructions"].is_null()) {
    return translate_error("instructions", "must be a string");
  }
  for (const OJson& m : history) msgs.push_back(m);
  OJson chat = {{"model", body["model"]}, {"messages", std::move(msgs)}};
  if (body.contains("max_output_tokens") && !body["max_output_tokens"].is_null()) {
    chat["max_tokens"] = body["max_output_tokens"];
  }
  for (const char* k : {"temperature", "top_p", "parallel_tool_calls", "seed"}) {
    if (body.contains(k) && !body[k].is_null()) chat[k] = body[k];
  }
  if (body.contains("tools") && !body["tools"].is_null()) {
    MX_ASSIGN_OR_RETURN(chat["tools"], translate_tools(body["tools"]));
    if (chat["tools"].empty()) chat.erase("tools");
  }
  if (body.contains("tool_choice") && !body["tool_choice"].is_null() && chat.contains("tools")) {
    MX_ASSIGN_OR_RETURN(chat["tool_choice"], translate_tool_choice(body["tool_choice"]));
  }
  if (body.contains("text")) {
    MX_ASSIGN_OR_RETURN(OJson rf, translate_format(body["text"]));
    if (!rf.is_null()) chat["response_format"] = std::move(rf);
  }
  if (body.value("stream", false)) {
    chat["stream"] = true;
    chat["stream_options"] = {{"include_usage", true}};
  }
  r.store = body.value("store", true);
  r.chat = std::move(chat);
  r.history = std::move(history);
  r.echo = {{"model", body["model"]},
            {"instructions", body.value("instructions", OJson())},
            {"max_output_tokens", body.value("max_output_tokens", OJson())},
            {"parallel_tool_calls", body.value("parallel_tool_calls", true)},
            {"previous_response_id", body.value("previous_response_id", OJson())},
            {"temperature", body.value("temperature", OJson())},
            {"top_p", body.value("top_p", OJson())},
            {"tool_choice", body.value("tool_choice", OJson("auto"))},
            {"tools", body.value("tools", OJson::array())},
            {"text", body.value("text", OJson{{"format", {{"type", "text"}}}})},
            {"store", r.store},
            {"truncation", "disabled"},
            {"metadata", body.value("metadata", OJson::object())}};
  return r;
}

std::shared_ptr<ChatTranslator> responses_translator(ResponsesRequest req, ResponseStore& store) {
  return std::make_shared<ResponsesTranslator>(std::move(req), store);
}

}  // namespace mx
