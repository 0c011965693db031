// The inside of HttpCore (server/http_core.h), shared by its two files:
// http_core.cc (accepting, starting, stopping) and http_connection.cc (one
// client connection: reading requests, writing answers, deadlines). Only
// those two include it: it brings in Boost.Beast and Boost.Asio.
#pragma once

#include <atomic>
#include <utility>  // before Boost: its awaitable.hpp uses std::exchange
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/mutex.h"
#include "server/http_core.h"

namespace tandem {

namespace http_internal {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

constexpr size_t kMaxPipelinedBytes = size_t(64) << 10;  // read ahead while a request is worked on
constexpr size_t kReadAhead = 4096;                      // one read-ahead step
constexpr size_t kWriteSlice = size_t(64) << 10;         // the write deadline restarts after each
constexpr size_t kMaxLingerBytes = size_t(64) << 20;     // unread body discarded after an error answer
constexpr auto kLinger = std::chrono::milliseconds(2000);

bool EqualsIgnoreCase(std::string_view a, std::string_view b);
const char* Reason(int status);
std::string ErrorBody(int status, const std::string& message, const std::string& type);
std::string Seconds(std::chrono::milliseconds ms);

class Connection;

// Runs a route's handler so that nothing it throws leaves it: the failure is
// logged and counted, and a request not yet answered gets a 500 (a stream
// already under way is cut off, never ended cleanly). No input ends a process.
void RunHandler(HttpCore::Impl& core, const HttpHandler& handler, HttpRequest& request,
                const std::shared_ptr<HttpReply>& reply);

struct RouteEntry {
  std::string method, path;
  HttpHandler handler;
  bool quick = false;  // served on the I/O thread, and past max_connections
};

}  // namespace http_internal

class HttpCore::Serial {
 public:
  explicit Serial(http_internal::asio::thread_pool& pool) : strand(http_internal::asio::make_strand(pool)) {}
  http_internal::asio::strand<http_internal::asio::thread_pool::executor_type> strand;
};

struct HttpCore::Impl {
  Impl(HttpLimits l, AccessPolicy a) : limits(l), access(std::move(a)) {}
  void Accept();
  void Refuse(http_internal::tcp::socket& socket);

  const HttpLimits limits;
  const AccessPolicy access;
  std::vector<http_internal::RouteEntry> routes;
  int port = 0;
  std::atomic<bool> started{false}, stopped{false};
  std::atomic<int64_t> open{0}, accepted{0}, refused{0}, deadline_closed{0}, too_large{0}, hang_ups{0};
  std::atomic<int64_t> handler_failures{0};  // handlers (or posted work) that threw
  Mutex mu;
  std::condition_variable all_shut;
  // Connections not yet shut.
  std::unordered_map<http_internal::Connection*, std::weak_ptr<http_internal::Connection>> live GUARDED_BY(mu);
  // Declared after what connections touch: destroying these destroys the
  // handlers (and connections) they still hold.
  http_internal::asio::io_context io;
  http_internal::tcp::acceptor acceptor{io};
  http_internal::asio::steady_timer accept_retry{io};
  std::optional<http_internal::asio::thread_pool> workers;
  std::vector<std::thread> io_threads;
};

namespace http_internal {

// A connection accepted (past max_connections: overflow), started on its strand.
void StartConnection(HttpCore::Impl& core, tcp::socket socket, bool overflow);
// Server stop: an answer already whole is written out first, then it closes.
void ShutConnection(const std::shared_ptr<Connection>& connection);

}  // namespace http_internal
}  // namespace tandem
