// The event-driven HTTP/1.1 front door of `serve` and `router` (Boost.Beast
// over Boost.Asio; no Boost type is visible here).
//
// Connections are not threads: a few I/O threads run every socket, so an open
// stream costs a connection object and its buffers, not a thread. What it
// guards, whatever clients do:
// - deadlines: a request's header must arrive within header_timeout (the
//   wait for the next request on a kept-alive connection: idle_timeout), its
//   body within body_timeout, and a response that makes no progress for
//   write_timeout closes the connection;
// - limits: headers over max_header_bytes get 431 and bodies over
//   max_body_bytes 413, whatever their transfer encoding, checked as they
//   arrive (nothing larger is ever buffered); a response the client does not
//   read stops being queued past max_buffered_bytes;
// - max_connections: past it, a connection may still ask for the quick routes
//   (/health, /metrics, /v1/models) and gets 503 for anything else; past it by
//   kOverflowConnections more, it gets 503 at once;
// - quick routes run on the I/O threads and answer while every worker and
//   engine slot is busy; other routes run on a small worker pool;
// - API keys (AccessPolicy) on /v1/ routes, CORS headers and preflights,
//   before any handler runs;
// - a client that hangs up is noticed while its request is still being
//   worked on (queued, computing or streaming): the reply's hang-up callback
//   runs at once, so the handler can cancel the work.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"
#include "server/access.h"

namespace tandem {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;
  std::string target;  // as sent: path and query
  std::string path;    // without the query
  HttpHeaders headers;
  std::string body;
  // The first header of that name (case-insensitive); "" when absent.
  std::string Header(std::string_view name) const;
};

// One request's answer. Every method may be called from any thread, at any
// time, any number of times: calls after the client is gone, or after the
// answer ended, do nothing.
class HttpReply {
 public:
  virtual ~HttpReply() = default;
  // A whole answer.
  virtual void Send(int status, std::string_view content_type, std::string body, HttpHeaders headers = {}) = 0;
  // A streamed answer (chunked): the status and headers now, then Write()s, then End().
  virtual void StartStream(int status, std::string_view content_type, HttpHeaders headers = {}) = 0;
  // False: the client is gone, or has left more than max_buffered_bytes unread.
  virtual bool Write(std::string data) = 0;
  virtual void End() = 0;
  // Ends the answer as broken: the connection is closed without finishing
  // it, so the client sees a cut-off answer, never a complete-looking one.
  virtual void Abort() = 0;
  // Runs once, on an I/O thread, when the connection goes away before the
  // answer has been written whole (client hang-up, deadline, server stop);
  // at once if it already has.
  virtual void OnHangUp(std::function<void()> callback) = 0;
  virtual bool gone() const = 0;
  // True once Send or StartStream was called.
  virtual bool started() const = 0;
};

using HttpHandler = std::function<void(HttpRequest& request, std::shared_ptr<HttpReply> reply)>;

struct HttpLimits {
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds idle_timeout{60'000};  // kept-alive, between requests
  std::chrono::milliseconds body_timeout{60'000};
  std::chrono::milliseconds write_timeout{60'000};
  size_t max_header_bytes = size_t(64) << 10;
  size_t max_body_bytes = size_t(8) << 20;
  size_t max_buffered_bytes = size_t(8) << 20;  // unsent answer bytes (a client not reading)
  int max_connections = 8192;
  int io_threads = 1;
  int worker_threads = 2;
};

struct HttpCoreStats {
  int64_t open_connections = 0;
  int64_t accepted = 0;
  int64_t refused = 0;           // past max_connections: 503
  int64_t deadline_closed = 0;   // header, body or write deadline passed
  int64_t too_large = 0;         // 413 and 431
  int64_t hang_ups = 0;          // gone before the answer was written whole
  int64_t handler_failures = 0;  // a handler threw: answered 500 (or cut off), logged
};

class HttpCore {
 public:
  static constexpr int kOverflowConnections = 256;

  HttpCore(HttpLimits limits, AccessPolicy access);
  ~HttpCore();
  HttpCore(const HttpCore&) = delete;
  HttpCore& operator=(const HttpCore&) = delete;

  // Before Start. quick: runs on an I/O thread and must not block (health,
  // metrics); it is also served past max_connections.
  void Route(std::string method, std::string path, HttpHandler handler, bool quick = false);

  // Binds host:port (0: any free port) and starts serving.
  Status Start(const std::string& host, int port);
  int port() const;
  // Stops accepting, closes every connection (their hang-up callbacks run)
  // and joins the threads. Idempotent.
  void Stop();

  HttpCoreStats stats() const;
  // The stats as Prometheus text, metric names prefixed by `prefix`.
  std::string MetricsText(const std::string& prefix) const;

  // Runs `work` on the worker pool, after every earlier call with the same
  // serial (one at a time, in order). A serial must not outlive Stop().
  class Serial;
  std::shared_ptr<Serial> NewSerial();
  void Post(const std::shared_ptr<Serial>& serial, std::function<void()> work);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// An error answer in OpenAI's shape (413, 429 and 503 also say Retry-After
// where a retry can help).
void SendApiError(HttpReply& reply, int status, const std::string& message, const std::string& type = "",
                  HttpHeaders headers = {});

}  // namespace tandem
