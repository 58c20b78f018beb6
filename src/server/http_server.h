// An asynchronous HTTP/1.1 server on Boost.Beast: a fixed number of I/O threads whatever the
// number of connections, every read bounded in size and in time, requests checked for
// authentication from their header before any body byte is read, a connection cap answered
// with 503, and a graceful shutdown that lets running exchanges finish. It knows nothing of
// the OpenAI API; the handler it is given does.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace mx {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  int io_threads = 2;
  int worker_threads = 2;  // run the handlers, so that parsing never stalls the I/O threads
  int max_connections = 2048;
  int backlog = 4096;
  size_t header_limit = 16 << 10;
  size_t body_limit = 8u << 20;
  size_t max_body_bytes_in_flight = 64u << 20;  // all connections' bodies together (>= body_limit)
  std::chrono::milliseconds header_timeout{10000};  // the whole header of a request
  std::chrono::milliseconds body_timeout{30000};    // the whole body
  std::chrono::milliseconds idle_timeout{30000};    // between requests on a kept-alive connection
  std::chrono::milliseconds write_timeout{30000};   // one write that makes no progress
};

// A request head: what is known before the body.
struct HttpHead {
  std::string method;                          // upper case, as sent
  std::string path;                            // the target without its query
  std::map<std::string, std::string> headers;  // names lower-cased
  std::optional<uint64_t> content_length;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// Header fields a reply adds to Server, Content-Type and the framing the server sets.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpReply {
  HttpReply() = default;
  HttpReply(int code, std::string type, std::string text, HttpHeaders extra = {})
      : status(code),
        content_type(std::move(type)),
        body(std::move(text)),
        headers(std::move(extra)) {}
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;
};

// One exchange's reply channel. Every method may be called from any thread; they are queued
// in order onto the connection. Calls after the client went away do nothing.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual void send(HttpReply reply) = 0;
  // A chunked reply: the head now, then chunks, then end().
  virtual void start_stream(int status, const std::string& content_type) = 0;
  virtual void write(std::string chunk) = 0;
  virtual void end() = 0;
  // Called once (on an I/O thread) when the client disconnects before the reply is complete.
  virtual void on_disconnect(std::function<void()> fn) = 0;
};

struct HttpHandler {
  // Before the body is read: a reply here rejects the request (and closes the connection, so
  // the body is never read). Authentication belongs here.
  std::function<std::optional<HttpReply>(const HttpHead&)> check_head;
  std::function<void(const HttpHead&, std::string body, std::shared_ptr<HttpExchange>)> handle;
};

class HttpServer {
 public:
  HttpServer(const HttpServerConfig& config, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; fails naming the address and the system's reason (a port in use).
  Status listen();
  int port() const;
  // Serves until the shutdown completes or stop(); SIGINT and SIGTERM begin a shutdown when
  // `on_signal` is set (it is called on an I/O thread with the signal number).
  void run(std::function<void(int)> on_signal);
  // Stops accepting, closes idle connections and answers new requests on kept-alive ones with
  // 503; run() returns once no exchange is running, or `timeout` after this call: then
  // `on_timeout` runs and the exchanges get `grace` to end before the connections close.
  void shutdown(std::chrono::milliseconds timeout, std::function<void()> on_timeout,
                std::chrono::milliseconds grace = std::chrono::milliseconds(3000));
  // Calls `fn` on an I/O thread every `period` while run() runs.
  void every(std::chrono::milliseconds period, std::function<void()> fn);
  // Ends run() now.
  void stop();
  int64_t open_connections() const;
  int64_t running_exchanges() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace mx
