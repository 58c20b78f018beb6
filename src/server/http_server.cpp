#include "server/http_server.h"

#include <malloc.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

#include "core/log.h"

namespace mx {
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using beast::error_code;

namespace {

class Session;

std::string error_json(const std::string& message, const std::string& type, int code) {
  // Hand-built: the messages here are fixed ASCII, and this layer has no JSON library.
  return "{\"error\":{\"message\":\"" + message + "\",\"type\":\"" + type +
         "\",\"param\":null,\"code\":" + std::to_string(code) + "}}";
}

HttpReply error_reply(int status, const std::string& message) {
  return {status, "application/json",
          error_json(message, status == 503 ? "server_busy" : "invalid_request_error", status)};
}

// Raises the soft descriptor limit to the hard one: each connection holds a descriptor, and
// the usual soft limit of 1024 would refuse connections long before the cap.
int raise_fd_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
  if (r.rlim_cur < r.rlim_max) {
    rlimit want = r;
    want.rlim_cur = r.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &want) == 0) r = want;
  }
  return r.rlim_cur > (1u << 30) ? (1 << 30) : static_cast<int>(r.rlim_cur);
}

}  // namespace

struct HttpServer::Impl {
  HttpServerConfig config;
  HttpHandler handler;
  std::atomic<int64_t> connections{0}, exchanges{0};
  std::atomic<int64_t> body_bytes{0};  // held by request bodies, all connections together
  int64_t max_body_bytes = 0;
  std::atomic<bool> draining{false};
  std::mutex mu;
  std::list<std::weak_ptr<Session>> sessions;  // guarded by mu
  int bound_port = 0;
  int max_connections = 0;
  std::chrono::steady_clock::time_point deadline, hard_deadline;
  bool timed_out = false;
  std::function<void()> on_timeout;
  std::chrono::milliseconds grace{0};
  // Declared after what sessions touch as they are destroyed: the io_context's destructor
  // destroys the handlers that hold the last references to sessions.
  net::io_context ioc;
  net::thread_pool workers;
  tcp::acceptor acceptor;
  net::signal_set signals;
  net::steady_timer retry_timer, shutdown_timer;
  std::vector<std::shared_ptr<net::steady_timer>> periodic;
  std::vector<std::shared_ptr<std::function<void()>>> ticks;
  std::function<void(int)> on_signal;

  Impl(const HttpServerConfig& c, HttpHandler h)
      : config(c),
        handler(std::move(h)),
        ioc(std::max(1, c.io_threads)),
        workers(static_cast<size_t>(std::max(1, c.worker_threads))),
        acceptor(net::make_strand(ioc)),
        signals(ioc),
        retry_timer(acceptor.get_executor()),
        shutdown_timer(acceptor.get_executor()) {}

  void accept();
  void on_accept(error_code ec, tcp::socket socket);
  void refuse(tcp::socket socket);
  void poll_shutdown();
  void wait_signal();
  std::list<std::weak_ptr<Session>>::iterator add(const std::shared_ptr<Session>& s) {
    std::lock_guard<std::mutex> lock(mu);
    return sessions.insert(sessions.end(), s);
  }
  bool reserve_body(int64_t n) {
    if (body_bytes.fetch_add(n) + n <= max_body_bytes) return true;
    body_bytes.fetch_sub(n);
    return false;
  }
  void release_body(int64_t n) { body_bytes.fetch_sub(n); }
  void remove(std::list<std::weak_ptr<Session>>::iterator it) {
    std::lock_guard<std::mutex> lock(mu);
    sessions.erase(it);
  }
};

namespace {

class Exchange;

// One connection. Everything runs on its strand: reads, writes, timers and the queued calls of
// its exchange.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl* srv)
      : stream_(std::move(socket)),
        srv_(srv),
        poll_timer_(stream_.get_executor()),
        write_timer_(stream_.get_executor()) {
    ++srv_->connections;
  }
  ~Session() {
    srv_->release_body(std::exchange(held_, 0));
    if (registered_) srv_->remove(it_);
    if (!closed_) --srv_->connections;
  }

  void start() {
    it_ = srv_->add(shared_from_this());
    registered_ = true;
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_head(true); });
  }
  // From any thread: closes the connection unless it is running an exchange.
  void close_if_idle() {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->in_exchange_) self->close();
    });
  }

  // The exchange's calls, queued onto the strand. `gen` tells a stale exchange's calls apart.
  struct Out {
    enum Kind { kFull, kHead, kChunk, kLast } kind;
    HttpReply reply;
    std::string data;
  };
  void enqueue(uint64_t gen, Out out) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), gen, o = std::move(out)]() mutable {
                if (gen != self->gen_ || self->closed_ || self->reply_queued_) return;
                if (o.kind == Out::kFull || o.kind == Out::kLast) self->reply_queued_ = true;
                self->out_.push_back(std::move(o));
                if (!self->writing_) self->write_next();
              });
  }
  void set_on_disconnect(uint64_t gen, std::function<void()> fn) {
    net::post(stream_.get_executor(),
              [self = shared_from_this(), gen, f = std::move(fn)]() mutable {
                // A connection that closed before the handler got here still tells it.
                if (self->closed_) return f();
                if (gen != self->gen_) return;
                self->on_disconnect_ = std::move(f);
              });
  }

 private:
  const HttpServerConfig& cfg() const { return srv_->config; }

  void read_head(bool first) {
    if (srv_->draining) return close();
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(cfg().header_limit));
    parser_->body_limit(cfg().body_limit);
    chunked_body_ = std::string();
    over_budget_ = false;
    parser_->on_chunk_body(chunk_cb_);
    stream_.expires_after(first ? cfg().header_timeout : cfg().idle_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_head(ec); });
  }

  void on_head(error_code ec) {
    if (ec == http::error::header_limit) return reject(error_reply(431, "the header is too large"));
    // A Content-Length over the limit fails here, before any body byte.
    if (ec == http::error::body_limit)
      return reject(error_reply(413, "the request body is too large"));
    if (ec == beast::error::timeout || ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::operation_aborted || closed_) {
      return close();
    }
    if (ec) return reject(error_reply(400, "malformed HTTP request: " + ec.message()));
    const auto& msg = parser_->get();
    head_ = HttpHead{};
    head_.method = std::string(msg.method_string());
    const std::string target(msg.target());
    head_.path = target.substr(0, target.find('?'));
    for (const auto& f : msg) {
      std::string name(f.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      head_.headers[name] = std::string(f.value());
    }
    if (auto n = parser_->content_length()) head_.content_length = *n;
    if (srv_->draining) return reject(error_reply(503, "the server is shutting down"));
    if (head_.content_length && *head_.content_length > cfg().body_limit) {
      return reject(error_reply(413, "the request body is too large"));
    }
    if (head_.content_length && !hold(static_cast<int64_t>(*head_.content_length))) {
      return reject(error_reply(503, "too many request bodies in flight; retry later"));
    }
    if (srv_->handler.check_head) {
      if (auto r = srv_->handler.check_head(head_)) return reject(std::move(*r));
    }
    if (beast::iequals(msg[http::field::expect], "100-continue")) {
      // curl waits a second for this before sending a body over 1 KiB.
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = shared_from_this()](error_code e, size_t) {
                         if (e) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(cfg().body_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->on_body(ec); });
  }

  // Bodies count against one budget for all connections, so that many large uploads at once
  // cannot take memory without bound. A chunked body grows here, its capacity counted.
  bool hold(int64_t n) {
    if (!srv_->reserve_body(n)) return false;
    held_ += n;
    return true;
  }
  size_t on_chunk(beast::string_view data, error_code& ec) {
    const size_t need = chunked_body_.size() + data.size();
    if (need > cfg().body_limit) {
      ec = http::error::body_limit;
      return 0;
    }
    if (need > chunked_body_.capacity()) {
      const size_t cap = std::max(need, std::min(2 * chunked_body_.capacity(), cfg().body_limit));
      if (!hold(static_cast<int64_t>(cap - chunked_body_.capacity()))) {
        over_budget_ = true;
        ec = http::error::body_limit;
        return 0;
      }
      chunked_body_.reserve(cap);
    }
    chunked_body_.append(data.data(), data.size());
    return data.size();
  }

  void on_body(error_code ec) {
    if (ec == http::error::body_limit && over_budget_) {
      return reject(error_reply(503, "too many request bodies in flight; retry later"));
    }
    if (ec == http::error::body_limit)
      return reject(error_reply(413, "the request body is too large"));
    if (ec == beast::error::timeout) return reject(error_reply(408, "the request body timed out"));
    if (ec || closed_) return close();
    keep_alive_ = parser_->get().keep_alive();
    std::string body =
        parser_->chunked() ? std::move(chunked_body_) : std::move(parser_->get().body());
    parser_.reset();
    begin_exchange(std::move(body));
  }

  void begin_exchange(std::string body);
  void finish_exchange() {
    if (!in_exchange_) return;
    in_exchange_ = false;
    ++gen_;
    --srv_->exchanges;
    on_disconnect_ = nullptr;
    poll_timer_.cancel();
  }

  // A reply that ends the connection: sent without reading the body.
  void reject(HttpReply reply) {
    if (closed_) return;
    keep_alive_ = false;
    stream_.expires_never();
    in_exchange_ = false;
    reply_queued_ = true;
    out_.push_back({Out::kFull, std::move(reply), {}});
    if (!writing_) write_next();
  }

  void write_next();
  void on_written(error_code ec);

  // After a reply sent without reading the body: closing at once would reset the connection
  // while the client is still sending, and it would lose the reply. Half-close, then discard
  // what still arrives, for a bounded time and amount.
  void linger() {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    if (!discard_) discard_ = std::make_unique<char[]>(kDiscardBytes);
    stream_.expires_after(std::chrono::seconds(2));
    discard_more();
  }
  void discard_more() {
    stream_.async_read_some(net::buffer(discard_.get(), kDiscardBytes),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->discarded_ += n;
                              if (ec || self->discarded_ > kMaxDiscard) return self->close();
                              self->discard_more();
                            });
  }
  static constexpr size_t kDiscardBytes = 16 << 10;
  static constexpr size_t kMaxDiscard = 64u << 20;

  // Between polls a disconnect goes unnoticed; a request the client abandoned is cancelled
  // within this, without a read racing the next request's bytes.
  void poll_disconnect() {
    poll_timer_.expires_after(std::chrono::milliseconds(10));
    poll_timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || !self->in_exchange_ || self->closed_) return;
      char c;
      const ssize_t n =
          ::recv(self->stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      const bool gone =
          n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
      if (gone) return self->close();
      self->poll_disconnect();
    });
  }

 public:
  void close() {
    if (closed_) return;
    closed_ = true;
    --srv_->connections;
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    poll_timer_.cancel();
    write_timer_.cancel();
    out_.clear();
    parser_.reset();
    chunked_body_ = std::string();
    srv_->release_body(std::exchange(held_, 0));
    auto fn = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
    if (in_exchange_) finish_exchange();
    if (fn) fn();
  }

 private:
  beast::tcp_stream stream_;
  HttpServer::Impl* srv_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpHead head_;
  net::steady_timer poll_timer_, write_timer_;
  std::deque<Out> out_;
  std::shared_ptr<http::response<http::string_body>> full_;
  std::shared_ptr<http::response<http::empty_body>> stream_head_;
  std::shared_ptr<http::response_serializer<http::empty_body>> serializer_;
  std::function<void()> on_disconnect_;
  std::unique_ptr<char[]> discard_;
  std::string chunked_body_;
  std::function<size_t(uint64_t, beast::string_view, error_code&)> chunk_cb_ =
      [this](uint64_t, beast::string_view data, error_code& ec) { return on_chunk(data, ec); };
  int64_t held_ = 0;
  bool over_budget_ = false;
  size_t discarded_ = 0;
  std::list<std::weak_ptr<Session>>::iterator it_;
  uint64_t gen_ = 0;
  bool registered_ = false, closed_ = false, in_exchange_ = false, writing_ = false;
  bool reply_queued_ = false, keep_alive_ = true;
};

class Exchange : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Session> s, uint64_t gen) : s_(std::move(s)), gen_(gen) {}
  void send(HttpReply reply) override {
    s_->enqueue(gen_, {Session::Out::kFull, std::move(reply), {}});
  }
  void start_stream(int status, const std::string& content_type) override {
    s_->enqueue(gen_, {Session::Out::kHead, {status, content_type, {}}, {}});
  }
  void write(std::string chunk) override {
    if (chunk.empty()) return;  // an empty chunk would end the body
    s_->enqueue(gen_, {Session::Out::kChunk, {}, std::move(chunk)});
  }
  void end() override { s_->enqueue(gen_, {Session::Out::kLast, {}, {}}); }
  void on_disconnect(std::function<void()> fn) override {
    s_->set_on_disconnect(gen_, std::move(fn));
  }

 private:
  std::shared_ptr<Session> s_;
  uint64_t gen_;
};

void Session::begin_exchange(std::string body) {
  stream_.expires_never();
  in_exchange_ = true;
  reply_queued_ = false;
  ++srv_->exchanges;
  poll_disconnect();
  auto ex = std::make_shared<Exchange>(shared_from_this(), gen_);
  // The body's share of the budget goes with it, back when the handler is done with it.
  const int64_t held = std::exchange(held_, 0);
  net::post(srv_->workers, [srv = srv_, head = head_, b = std::move(body), ex, held]() mutable {
    try {
      srv->handler.handle(head, std::move(b), ex);
    } catch (const std::exception& e) {
      MX_LOG_ERROR(std::string("request handler failed: ") + e.what());
      ex->send(error_reply(500, "internal error"));
    }
    srv->release_body(held);
  });
}

void Session::write_next() {
  if (out_.empty() || closed_) {
    writing_ = false;
    return;
  }
  writing_ = true;
  Out& o = out_.front();
  // The stream's own timer is off while replying (a stream may run for minutes); this one
  // ends a write that makes no progress, a client that stopped reading.
  write_timer_.expires_after(cfg().write_timeout);
  write_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec) self->close();
  });
  const bool keep = keep_alive_ && !srv_->draining;
  auto done = [self = shared_from_this()](error_code ec, size_t) { self->on_written(ec); };
  switch (o.kind) {
    case Out::kFull: {
      full_ = std::make_shared<http::response<http::string_body>>(
          static_cast<http::status>(o.reply.status), 11);
      full_->set(http::field::server, "mxserve");
      full_->set(http::field::content_type, o.reply.content_type);
      for (const auto& [name, value] : o.reply.headers) full_->set(name, value);
      full_->keep_alive(keep);
      full_->body() = std::move(o.reply.body);
      full_->prepare_payload();
      http::async_write(stream_, *full_, std::move(done));
      return;
    }
    case Out::kHead:
      stream_head_ = std::make_shared<http::response<http::empty_body>>(
          static_cast<http::status>(o.reply.status), 11);
      stream_head_->set(http::field::server, "mxserve");
      stream_head_->set(http::field::content_type, o.reply.content_type);
      stream_head_->set(http::field::cache_control, "no-cache");
      stream_head_->keep_alive(keep);
      stream_head_->chunked(true);
      serializer_ = std::make_shared<http::response_serializer<http::empty_body>>(*stream_head_);
      http::async_write_header(stream_, *serializer_, std::move(done));
      return;
    case Out::kChunk:
      net::async_write(stream_, http::make_chunk(net::buffer(o.data)), std::move(done));
      return;
    case Out::kLast:
      net::async_write(stream_, http::make_chunk_last(), std::move(done));
      return;
  }
}

void Session::on_written(error_code ec) {
  write_timer_.cancel();
  if (ec || closed_) return close();
  const Out::Kind kind = out_.front().kind;
  out_.pop_front();
  full_.reset();
  if (kind != Out::kFull && kind != Out::kLast) return write_next();
  writing_ = false;
  serializer_.reset();
  stream_head_.reset();
  const bool was_exchange = in_exchange_;
  finish_exchange();
  if (!was_exchange) return linger();
  if (!keep_alive_ || srv_->draining) {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    return close();
  }
  read_head(false);
}

}  // namespace

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc),
                        [this](error_code ec, tcp::socket s) { on_accept(ec, std::move(s)); });
}

void HttpServer::Impl::refuse(tcp::socket socket) {
  static const std::string kBody = error_json("too many connections", "server_busy", 503);
  static const std::string kReply =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
      std::to_string(kBody.size()) + "\r\nConnection: close\r\n\r\n" + kBody;
  auto s = std::make_shared<tcp::socket>(std::move(socket));
  net::async_write(*s, net::buffer(kReply), [s](error_code, size_t) {
    error_code ignored;
    s->shutdown(tcp::socket::shutdown_both, ignored);
    s->close(ignored);
  });
}

void HttpServer::Impl::on_accept(error_code ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
  if (ec) {
    // Out of descriptors: the pending connection stays in the backlog; try again shortly
    // rather than spinning.
    MX_LOG_WARN("accept failed: " + ec.message());
    retry_timer.expires_after(std::chrono::milliseconds(50));
    retry_timer.async_wait([this](error_code e) {
      if (!e) accept();
    });
    return;
  }
  error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (connections.load() >= max_connections) {
    refuse(std::move(socket));
  } else {
    std::make_shared<Session>(std::move(socket), this)->start();
  }
  accept();
}

void HttpServer::Impl::poll_shutdown() {
  const auto now = std::chrono::steady_clock::now();
  if (exchanges.load() == 0 || now >= hard_deadline) {
    if (exchanges.load() > 0) {
      MX_LOG_WARN("shutdown: " + std::to_string(exchanges.load()) +
                  " requests still open after the grace period; closing them");
    }
    ioc.stop();
    return;
  }
  if (!timed_out && now >= deadline) {
    timed_out = true;
    hard_deadline = now + grace;
    if (on_timeout) on_timeout();
  }
  shutdown_timer.expires_after(std::chrono::milliseconds(50));
  shutdown_timer.async_wait([this](error_code e) {
    if (!e) poll_shutdown();
  });
}

HttpServer::HttpServer(const HttpServerConfig& config, HttpHandler handler)
    : impl_(std::make_shared<Impl>(config, std::move(handler))) {}

HttpServer::~HttpServer() {
  impl_->workers.stop();
  impl_->workers.join();
}

Status HttpServer::listen() {
  Impl& m = *impl_;
  const HttpServerConfig& c = m.config;
  if (c.port < 0 || c.port > 65535) {
    return invalid_argument("port " + std::to_string(c.port) + " is outside 0..65535");
  }
  error_code ec;
  const auto addr = net::ip::make_address(c.host, ec);
  if (ec) return invalid_argument("cannot listen on '" + c.host + "': not an IP address");
  const std::string where = c.host + ":" + std::to_string(c.port);
  const tcp::endpoint ep(addr, static_cast<uint16_t>(c.port));
  // SO_REUSEADDR only: a port in TIME_WAIT can be bound again, but never one another server
  // is listening on (SO_REUSEPORT would share it).
  if (m.acceptor.open(ep.protocol(), ec); ec)
    return io_error("cannot listen on " + where + ": " + ec.message());
  m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (m.acceptor.bind(ep, ec); ec)
    return io_error("cannot listen on " + where + ": " + ec.message());
  if (m.acceptor.listen(c.backlog, ec); ec)
    return io_error("cannot listen on " + where + ": " + ec.message());
  m.bound_port = m.acceptor.local_endpoint().port();
  m.max_connections = std::max(1, std::min(c.max_connections, raise_fd_limit() - 64));
  m.max_body_bytes = static_cast<int64_t>(std::max(c.body_limit, c.max_body_bytes_in_flight));
  // Request bodies are the large short-lived allocations here. A fixed threshold (which turns
  // off glibc's sliding one) maps each of them on its own, so freeing one returns its memory.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  return Status::ok();
}

int HttpServer::port() const { return impl_->bound_port; }

void HttpServer::Impl::wait_signal() {
  signals.async_wait([this](error_code ec, int sig) {
    if (ec) return;
    on_signal(sig);
    wait_signal();
  });
}

void HttpServer::run(std::function<void(int)> on_signal) {
  Impl& m = *impl_;
  if (on_signal) {
    m.on_signal = std::move(on_signal);
    m.signals.add(SIGINT);
    m.signals.add(SIGTERM);
    m.wait_signal();
  }
  m.accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, m.config.io_threads); ++i) {
    threads.emplace_back([&m] { m.ioc.run(); });
  }
  m.ioc.run();
  for (auto& t : threads) t.join();
  // Handlers still running touch what the caller tears down next (the engine).
  m.workers.join();
}

void HttpServer::every(std::chrono::milliseconds period, std::function<void()> fn) {
  Impl& m = *impl_;
  auto timer = std::make_shared<net::steady_timer>(m.ioc);
  m.periodic.push_back(timer);
  auto tick = std::make_shared<std::function<void()>>();
  *tick = [period, fn = std::move(fn), w = std::weak_ptr<net::steady_timer>(timer),
           wt = std::weak_ptr<std::function<void()>>(tick)] {
    auto t = w.lock();
    if (!t) return;
    t->expires_after(period);
    t->async_wait([fn, wt](error_code ec) {
      if (ec) return;
      fn();
      if (auto next = wt.lock()) (*next)();
    });
  };
  m.ticks.push_back(tick);
  (*tick)();
}

void HttpServer::shutdown(std::chrono::milliseconds timeout, std::function<void()> on_timeout,
                          std::chrono::milliseconds grace) {
  Impl* m = impl_.get();
  // On the acceptor's strand: the accept loop and its timers run there.
  net::post(m->acceptor.get_executor(), [m, timeout, grace, fn = std::move(on_timeout)]() mutable {
    if (m->draining.exchange(true)) return;
    error_code ignored;
    m->acceptor.close(ignored);
    m->retry_timer.cancel();
    std::vector<std::shared_ptr<Session>> open;
    {
      std::lock_guard<std::mutex> lock(m->mu);
      for (auto& w : m->sessions) {
        if (auto s = w.lock()) open.push_back(std::move(s));
      }
    }
    for (auto& s : open) s->close_if_idle();
    const auto now = std::chrono::steady_clock::now();
    m->deadline = now + timeout;
    m->hard_deadline = m->deadline + grace;
    m->grace = grace;
    m->on_timeout = std::move(fn);
    m->poll_shutdown();
  });
}

void HttpServer::stop() { impl_->ioc.stop(); }

int64_t HttpServer::open_connections() const { return impl_->connections.load(); }
int64_t HttpServer::running_exchanges() const { return impl_->exchanges.load(); }

}  // namespace mx
