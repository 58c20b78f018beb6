#include "server/chat_translate.h"

#include <algorithm>
#include <cstdio>
#include <random>

namespace mx {

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return std::string(prefix) + hex;
}

std::string sse_event(const std::string& name, const OJson& data) {
  return "event: " + name + "\ndata: " + data.dump() + "\n\n";
}

Result<std::string> joined_text(const OJson& content, const std::string& field,
                                std::initializer_list<std::string_view> text_types,
                                std::initializer_list<std::string_view> refused) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return translate_error(field, "must be a string or a list of parts");
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const OJson& p = content[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    const std::string type = p.is_object() ? p.value("type", "") : "";
    auto among = [&](std::initializer_list<std::string_view> l) {
      return std::find(l.begin(), l.end(), type) != l.end();
    };
    if (among(text_types) && p.contains("text") && p["text"].is_string()) {
      text += p["text"].get<std::string>();
    } else if (among(refused)) {
      return translate_error(at, "'" + type + "' parts are not supported by this model");
    } else {
      return translate_error(at, "unknown or malformed part type '" + type + "'");
    }
  }
  return text;
}

Result<OJson> content_with_images(const OJson& content, const std::string& field,
                                  std::initializer_list<std::string_view> text_types,
                                  std::string_view image_type,
                                  const std::function<Result<std::string>(const OJson&)>& image_url,
                                  std::initializer_list<std::string_view> refused) {
  bool images = false;
  for (const OJson& p : content.is_array() ? content : OJson::array()) {
    images = images || (p.is_object() && p.value("type", "") == image_type);
  }
  if (!images) {
    MX_ASSIGN_OR_RETURN(std::string text, joined_text(content, field, text_types, refused));
    return OJson(std::move(text));
  }
  OJson parts = OJson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const OJson& p = content[i];
    const std::string at = field + "[" + std::to_string(i) + "]";
    if (p.is_object() && p.value("type", "") == image_type) {
      auto url = image_url(p);
      if (!url.is_ok()) return translate_error(at, url.status().message());
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", *url}}}});
      continue;
    }
    // A text part alone, so that a bad one is named by its own index.
    MX_ASSIGN_OR_RETURN(std::string text, joined_text(OJson::array({p}), at, text_types, refused));
    parts.push_back({{"type", "text"}, {"text", std::move(text)}});
  }
  return parts;
}

Result<OJson> tool_result_message(const OJson& item, const char* id_key, const char* content_key,
                                  const std::string& at,
                                  std::initializer_list<std::string_view> text_types,
                                  std::initializer_list<std::string_view> refused) {
  if (!item.contains(id_key) || !item[id_key].is_string()) {
    return translate_error(at + "." + id_key, "must be a string");
  }
  std::string text;
  if (item.contains(content_key)) {
    MX_ASSIGN_OR_RETURN(
        text, joined_text(item[content_key], at + "." + content_key, text_types, refused));
  }
  return OJson{{"role", "tool"}, {"tool_call_id", item[id_key]}, {"content", text}};
}

Result<OJson> chat_tools(
    const OJson& tools, const char* params_key,
    const std::function<Status(const OJson&, const std::string&)>& check_type) {
  if (!tools.is_array()) return translate_error("tools", "must be a list");
  OJson out = OJson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const OJson& t = tools[i];
    const std::string at = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) return translate_error(at, "must be an object");
    MX_RETURN_IF_ERROR(check_type(t, at));
    if (!t.contains("name") || !t["name"].is_string()) {
      return translate_error(at + ".name", "must be a string");
    }
    OJson fn = {{"name", t["name"]}};
    if (t.contains("description") && t["description"].is_string()) {
      fn["description"] = t["description"];
    }
    fn["parameters"] = t.contains(params_key) && t[params_key].is_object()
                           ? t[params_key]
                           : OJson{{"type", "object"}};
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

namespace {

// Parses the chat job's server-sent events as they arrive (a write may end mid-event) and
// passes each to the translator.
class TranslatingExchange : public HttpExchange {
 public:
  TranslatingExchange(std::shared_ptr<HttpExchange> inner, std::shared_ptr<ChatTranslator> t)
      : inner_(std::move(inner)), t_(std::move(t)) {}

  void send(HttpReply reply) override {
    OJson body = OJson::parse(reply.body, nullptr, false);
    if (body.is_discarded()) return inner_->send(std::move(reply));
    std::lock_guard<std::mutex> lock(mu_);
    inner_->send(t_->whole(reply.status, body));
  }
  void start_stream(int status, const std::string& content_type) override {
    inner_->start_stream(status, content_type);
  }
  void write(std::string chunk) override {
    std::lock_guard<std::mutex> lock(mu_);
    buf_ += chunk;
    std::string out;
    for (size_t end; (end = buf_.find("\n\n")) != std::string::npos;) {
      const std::string event = buf_.substr(0, end);
      buf_.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string data = event.substr(6);
      if (data == "[DONE]") {
        out += t_->done();
        continue;
      }
      OJson c = OJson::parse(data, nullptr, false);
      if (!c.is_discarded()) out += t_->chunk(c);
    }
    if (!out.empty()) inner_->write(std::move(out));
  }
  void end() override { inner_->end(); }
  void on_disconnect(std::function<void()> fn) override { inner_->on_disconnect(std::move(fn)); }

 private:
  std::shared_ptr<HttpExchange> inner_;
  std::shared_ptr<ChatTranslator> t_;
  std::mutex mu_;
  std::string buf_;
};

}  // namespace

std::shared_ptr<HttpExchange> translating_exchange(std::shared_ptr<HttpExchange> inner,
                                                   std::shared_ptr<ChatTranslator> t) {
  return std::make_shared<TranslatingExchange>(std::move(inner), std::move(t));
}

void ResponseStore::expire(Clock::time_point now) {
  while (!order_.empty() && (order_.size() > capacity_ || now - order_.front().at > ttl_)) {
    index_.erase(order_.front().id);
    order_.pop_front();
  }
}

void ResponseStore::put(const std::string& id, OJson messages) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  order_.push_back({id, std::move(messages), now});
  index_[id] = std::prev(order_.end());
  expire(now);
}

std::optional<OJson> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  expire(Clock::now());
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  return it->second->messages;
}

}  // namespace mx
