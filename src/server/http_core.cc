#include "server/http_core.h"

#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "server/http_core_internal.h"
#include "server/openai_api.h"

namespace tandem {

namespace http_internal {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Status";
  }
}

std::string ErrorBody(int status, const std::string& message, const std::string& type) {
  ApiError e;
  e.http_status = status;
  e.message = message;
  if (!type.empty()) {
    e.type = type;
  } else if (status == 429) {
    e.type = "rate_limit_error";
  } else if (status >= 500) {
    e.type = "server_error";
  }
  return ErrorJson(e);
}


std::string Seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g s", double(ms.count()) / 1000.0);
  return buf;
}

void RunHandler(HttpCore::Impl& core, const HttpHandler& handler, HttpRequest& request,
                const std::shared_ptr<HttpReply>& reply) {
  std::string what;
  try {
    handler(request, reply);
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an unknown exception";
  }
  ++core.handler_failures;
  TLOG_ERROR("http: %s %s failed inside its handler: %s\n", request.method.c_str(), request.path.c_str(), what.c_str());
  if (reply->started()) return reply->Abort();  // an answer under way is cut off, never ended cleanly
  SendApiError(*reply, 500, "the server failed to handle this request: " + what, "server_error");
}

}  // namespace http_internal

using namespace http_internal;

std::string HttpRequest::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

void SendApiError(HttpReply& reply, int status, const std::string& message, const std::string& type,
                  HttpHeaders headers) {
  if (status == 429 || status == 503) headers.emplace_back("Retry-After", "1");
  reply.Send(status, "application/json", ErrorBody(status, message, type), std::move(headers));
}

void HttpCore::Impl::Refuse(tcp::socket& socket) {
  static const std::string kRefusal = [] {
    const std::string body = ErrorBody(503, "the server has too many open connections; retry later", "");
    return "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\nContent-Type: application/json\r\n"
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  ::send(socket.native_handle(), kRefusal.data(), kRefusal.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  error_code ignored;
  socket.close(ignored);
}

void HttpCore::Impl::Accept() {
  acceptor.async_accept(asio::make_strand(io), [this](error_code ec, tcp::socket socket) {
    if (stopped) return;
    if (ec) {
      // Out of descriptors (or a transient error): try again shortly rather than spin.
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](error_code e) {
        if (!e && !stopped) Accept();
      });
      return;
    }
    ++accepted;
    const int64_t now_open = open.load();
    if (now_open >= int64_t(limits.max_connections) + HttpCore::kOverflowConnections) {
      ++refused;
      Refuse(socket);
    } else {
      StartConnection(*this, std::move(socket), now_open >= limits.max_connections);
    }
    Accept();
  });
}

HttpCore::HttpCore(HttpLimits limits, AccessPolicy access)
    : impl_(std::make_unique<Impl>(limits, std::move(access))) {}

HttpCore::~HttpCore() { Stop(); }

void HttpCore::Route(std::string method, std::string path, HttpHandler handler, bool quick) {
  impl_->routes.push_back(RouteEntry{std::move(method), std::move(path), std::move(handler), quick});
}

Status HttpCore::Start(const std::string& host, int port) {
  Impl& m = *impl_;
  if (m.started.exchange(true)) return FailedPrecondition("the HTTP server was started already");
  // Every connection is a descriptor: allow as many as the hard limit does.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  error_code ec;
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return InvalidArgument("'" + host + "' is not an IP address to listen on");
  const tcp::endpoint endpoint(address, uint16_t(port));
  m.acceptor.open(endpoint.protocol(), ec);
  if (!ec) m.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(endpoint, ec);
  if (!ec) m.acceptor.listen(4096, ec);
  if (ec) {
    return Unavailable("cannot listen on " + host + ":" + std::to_string(port) + " (" + ec.message() +
                       "; in use, or not an address of this host)");
  }
  m.port = m.acceptor.local_endpoint().port();
  m.workers.emplace(size_t(std::max(1, m.limits.worker_threads)));
  m.Accept();
  for (int i = 0; i < std::max(1, m.limits.io_threads); ++i) m.io_threads.emplace_back([&m] { m.io.run(); });
  return Status::Ok();
}

int HttpCore::port() const { return impl_->port; }

void HttpCore::Stop() {
  Impl& m = *impl_;
  if (!m.started || m.stopped.exchange(true)) return;
  asio::post(m.io, [&m] {
    error_code ignored;
    m.acceptor.close(ignored);
    m.accept_retry.cancel();
  });
  std::vector<std::shared_ptr<Connection>> conns;
  {
    MutexLock lock(m.mu);
    for (auto& [p, w] : m.live) {
      if (auto c = w.lock()) conns.push_back(std::move(c));
    }
  }
  for (auto& c : conns) ShutConnection(c);
  conns.clear();
  {
    UniqueLock lock(m.mu);
    m.all_shut.wait_for(lock.native(), std::chrono::seconds(2), [&]() REQUIRES(m.mu) { return m.live.empty(); });
  }
  m.io.stop();
  for (std::thread& t : m.io_threads) t.join();
  m.io_threads.clear();
  if (m.workers) {
    m.workers->stop();
    m.workers->join();
  }
}

HttpCoreStats HttpCore::stats() const {
  const Impl& m = *impl_;
  HttpCoreStats s;
  s.open_connections = m.open.load();
  s.accepted = m.accepted.load();
  s.refused = m.refused.load();
  s.deadline_closed = m.deadline_closed.load();
  s.too_large = m.too_large.load();
  s.hang_ups = m.hang_ups.load();
  s.handler_failures = m.handler_failures.load();
  return s;
}

std::string HttpCore::MetricsText(const std::string& prefix) const {
  const HttpCoreStats s = stats();
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, int64_t v) {
    out += "# HELP " + prefix + name + " " + help + "\n# TYPE " + prefix + name + " " + type + "\n" + prefix + name +
           " " + std::to_string(v) + "\n";
  };
  metric("http_open_connections", "gauge", "Client connections open now", s.open_connections);
  metric("http_accepted_total", "counter", "Client connections accepted", s.accepted);
  metric("http_refused_total", "counter", "Requests or connections refused for too many open connections (503)", s.refused);
  metric("http_deadline_closed_total", "counter", "Connections closed at a header, body or write deadline", s.deadline_closed);
  metric("http_too_large_total", "counter", "Requests refused for a header or body over the limit (431, 413)", s.too_large);
  metric("http_hang_ups_total", "counter", "Requests whose client went away before the answer was written", s.hang_ups);
  metric("http_handler_failures_total", "counter", "Requests whose handler failed unexpectedly (answered 500)",
         s.handler_failures);
  // Resident memory, for the front door's per-connection cost (Linux: /proc/self/statm).
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  metric("process_resident_memory_bytes", "gauge", "Resident memory of this process", int64_t(resident) * sysconf(_SC_PAGESIZE));
  return out;
}

std::shared_ptr<HttpCore::Serial> HttpCore::NewSerial() { return std::make_shared<Serial>(*impl_->workers); }

void HttpCore::Post(const std::shared_ptr<Serial>& serial, std::function<void()> work) {
  asio::post(serial->strand, [impl = impl_.get(), work = std::move(work)] {
    try {
      work();
    } catch (const std::exception& e) {  // never past the worker pool: no input ends a process
      ++impl->handler_failures;
      TLOG_ERROR("http: work posted for a request failed: %s\n", e.what());
    } catch (...) {
      ++impl->handler_failures;
      TLOG_ERROR("http: work posted for a request failed with an unknown exception\n");
    }
  });
}

}  // namespace tandem
