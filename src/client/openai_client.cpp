#include "client/openai_client.h"

#include <httplib.h>

#include <chrono>

namespace mx {
namespace {

using Clock = std::chrono::steady_clock;

// Splits "http://host:port/prefix" into the client address and the path prefix before /v1.
void split_url(const std::string& url, std::string* host, std::string* prefix) {
  std::string u = url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  if (u.size() >= 3 && u.compare(u.size() - 3, 3, "/v1") == 0) u.resize(u.size() - 3);
  const size_t scheme = u.find("://");
  const size_t path = u.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  *host = path == std::string::npos ? u : u.substr(0, path);
  *prefix = path == std::string::npos ? "" : u.substr(path);
}

httplib::Headers headers_of(const Endpoint& ep) {
  httplib::Headers h;
  if (!ep.api_key.empty()) h.emplace("Authorization", "Bearer " + ep.api_key);
  return h;
}

std::string error_message(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object() &&
      j["error"].contains("message") && j["error"]["message"].is_string()) {
    return j["error"]["message"].get<std::string>();
  }
  return body.substr(0, 200);
}

}  // namespace

StreamedCompletion stream_completion(const Endpoint& ep, nlohmann::json body) {
  std::string host, prefix;
  split_url(ep.base_url, &host, &prefix);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  StreamedCompletion r;
  httplib::Client cli(host);
  cli.set_read_timeout(3600);
  cli.set_tcp_nodelay(true);
  httplib::Request req;
  req.method = "POST";
  req.path = prefix + "/v1/completions";
  req.headers = headers_of(ep);
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  std::string raw, pending;
  bool bad_event = false;
  const Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  auto on_event = [&](const std::string& data) {
    if (data == "[DONE]") return;
    const nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
    if (!j.is_object()) {
      bad_event = true;
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
      r.completion_tokens = j["usage"].value("completion_tokens", int64_t{0});
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const nlohmann::json& c = j["choices"][0];
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
      r.finish_reason = c["finish_reason"].get<std::string>();
    }
    const std::string text =
        c.contains("text") && c["text"].is_string() ? c["text"].get<std::string>() : "";
    if (text.empty()) return;
    const Clock::time_point now = Clock::now();
    if (r.text.empty() && r.ttft == 0) {
      r.ttft = std::chrono::duration<double>(now - start).count();
    } else {
      r.itl.push_back(std::chrono::duration<double>(now - last).count());
    }
    last = now;
    r.text += text;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    raw.append(data, n);
    pending.append(data, n);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  r.latency = std::chrono::duration<double>(Clock::now() - start).count();
  if (!sent) {
    r.error = "cannot reach " + ep.base_url + ": " + httplib::to_string(err);
    return r;
  }
  r.status = res.status;
  if (res.status != 200) {
    r.error = "HTTP " + std::to_string(res.status) + ": " + error_message(raw);
    return r;
  }
  if (bad_event) {
    r.error = "the stream held an event that is not JSON";
    return r;
  }
  r.ok = true;
  return r;
}

Result<std::string> first_model_id(const Endpoint& ep) {
  std::string host, prefix;
  split_url(ep.base_url, &host, &prefix);
  httplib::Client cli(host);
  auto res = cli.Get(prefix + "/v1/models", headers_of(ep));
  if (!res) return io_error("cannot reach " + ep.base_url + ": " + httplib::to_string(res.error()));
  if (res->status != 200) {
    return io_error("GET /v1/models: HTTP " + std::to_string(res->status) + ": " +
                    error_message(res->body));
  }
  const nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    return invalid_argument("GET /v1/models: no model in the answer");
  }
  return j["data"][0]["id"].get<std::string>();
}

}  // namespace mx
