#include "server/http_client.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <array>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/mutex.h"

namespace tandem {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

class Call;

}  // namespace

struct HttpClient::Impl {
  void Closed(Call* call);

  Mutex mu;
  std::condition_variable all_closed;
  std::unordered_map<Call*, std::weak_ptr<Call>> live GUARDED_BY(mu);
  std::map<std::string, tcp::resolver::results_type> resolved GUARDED_BY(mu);
  bool stopped GUARDED_BY(mu) = false;
  // After what calls touch: destroying the context destroys the calls it holds.
  asio::io_context io;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::thread thread;
};

namespace {

// Headers and chunk framing of an answer; past it the answer is refused.
constexpr size_t kMaxFraming = size_t(256) << 10;

std::string Seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g s", double(ms.count()) / 1000.0);
  return buf;
}

// One forward: connect, send, read the head, relay the body.
class Call : public std::enable_shared_from_this<Call> {
 public:
  Call(HttpClient::Impl& client, HttpClientRequest request, HttpClientEvents events)
      : client_(client),
        socket_(asio::make_strand(client.io)),
        timer_(socket_.get_executor()),
        request_(std::move(request)),
        events_(std::move(events)) {}

  void Go(tcp::resolver::results_type endpoints) {
    Post([self = shared_from_this(), endpoints] {
      self->timer_.expires_after(self->request_.timeout);
      self->timer_.async_wait([self](error_code ec) {
        if (!ec) self->Close("no complete answer within " + Seconds(self->request_.timeout));
      });
      asio::async_connect(self->socket_, endpoints, [self](error_code ec, const tcp::endpoint&) {
        if (ec) return self->Close("cannot connect: " + ec.message());
        self->Send();
      });
    });
  }

  template <typename F>
  void Post(F&& f) {
    asio::post(socket_.get_executor(), std::forward<F>(f));
  }

  void Close(const std::string& error) {
    if (done_) return;
    done_ = true;
    timer_.cancel();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    auto on_done = std::move(events_.on_done);
    events_ = HttpClientEvents{};  // holds nothing of the caller past this point
    if (on_done) on_done(error);
    client_.Closed(this);
  }

 private:
  void Send() {
    std::string& r = wire_;
    r = request_.method + " " + request_.target + " HTTP/1.1\r\nHost: " + request_.host + ":" +
        std::to_string(request_.port) + "\r\nConnection: close\r\n";
    for (const auto& [k, v] : request_.headers) r += k + ": " + v + "\r\n";
    if (request_.method != "GET" || !request_.body.empty()) r += "Content-Length: " + std::to_string(request_.body.size()) + "\r\n";
    r += "\r\n";
    std::array<asio::const_buffer, 2> buffers{asio::buffer(wire_), asio::buffer(request_.body)};
    asio::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->Close("cannot send the request: " + ec.message());
      self->ReadHead();
    });
  }

  void ReadHead() {
    // Bounded by the caller (on_data) and the deadline. (Not boost::none:
    // Beast 1.74 compares a Content-Length against it as if it were 0.)
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
    parser_.header_limit(uint32_t(kMaxFraming / 2));
    http::async_read_header(socket_, buffer_, parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->done_) return;
      if (ec) return self->Close("no answer: " + ec.message());
      HttpHeaders headers;
      for (const auto& f : self->parser_.get()) headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      if (self->events_.on_head) self->events_.on_head(int(self->parser_.get().result_int()), headers);
      self->ReadBody();
    });
  }

  void ReadBody() {
    if (done_) return;
    if (parser_.is_done()) return Close("");
    parser_.get().body().data = chunk_.data();
    parser_.get().body().size = chunk_.size();
    http::async_read_some(socket_, buffer_, parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->done_) return;
      const size_t got = self->chunk_.size() - self->parser_.get().body().size;
      if (got > 0 && self->events_.on_data && !self->events_.on_data(std::string(self->chunk_.data(), got))) {
        return self->Close("stopped by the caller");
      }
      if (ec == http::error::need_buffer) ec = {};
      if (ec == http::error::end_of_stream || (ec == asio::error::eof && self->parser_.is_done())) ec = {};
      if (ec) return self->Close("the answer broke off: " + ec.message());
      self->ReadBody();
    });
  }

  HttpClient::Impl& client_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  HttpClientRequest request_;
  HttpClientEvents events_;
  std::string wire_;
  beast::flat_buffer buffer_{kMaxFraming};  // unparsed framing only: the body goes to chunk_
  http::response_parser<http::buffer_body> parser_;
  std::array<char, 16384> chunk_;
  bool done_ = false;
};

// What the caller holds: ends the call if it is still there.
class CallHandle final : public HttpCall {
 public:
  explicit CallHandle(std::weak_ptr<Call> call) : call_(std::move(call)) {}
  void Cancel() override {
    if (auto c = call_.lock()) c->Post([c] { c->Close("cancelled"); });
  }

 private:
  std::weak_ptr<Call> call_;
};

}  // namespace

void HttpClient::Impl::Closed(Call* call) {
  {
    MutexLock lock(mu);
    live.erase(call);
  }
  all_closed.notify_all();
}

HttpClient::HttpClient() : impl_(std::make_unique<Impl>()) {
  impl_->work.emplace(impl_->io.get_executor());
  impl_->thread = std::thread([m = impl_.get()] { m->io.run(); });
}

HttpClient::~HttpClient() { Stop(); }

std::shared_ptr<HttpCall> HttpClient::Start(HttpClientRequest request, HttpClientEvents events) {
  Impl& m = *impl_;
  const std::string key = request.host + ":" + std::to_string(request.port);
  tcp::resolver::results_type endpoints;
  bool stopping = false;
  {
    MutexLock lock(m.mu);
    stopping = m.stopped;
    if (!stopping) {
      if (auto it = m.resolved.find(key); it != m.resolved.end()) endpoints = it->second;
    }
  }
  if (stopping) {  // said without the lock: on_done may start another call
    if (events.on_done) events.on_done("the client is stopping");
    return std::make_shared<CallHandle>(std::weak_ptr<Call>());
  }
  if (endpoints.empty()) {
    tcp::resolver resolver(m.io);
    error_code ec;
    endpoints = resolver.resolve(request.host, std::to_string(request.port), ec);
    if (ec) {
      if (events.on_done) events.on_done("cannot resolve " + key + ": " + ec.message());
      return std::make_shared<CallHandle>(std::weak_ptr<Call>());
    }
    MutexLock lock(m.mu);
    m.resolved[key] = endpoints;
  }
  auto call = std::make_shared<Call>(m, std::move(request), std::move(events));
  bool stopped = false;
  {
    MutexLock lock(m.mu);
    stopped = m.stopped;
    if (!stopped) m.live[call.get()] = call;
  }
  if (stopped) {  // Stop() ran meanwhile: its context runs nothing more
    call->Close("the client is stopping");
    return std::make_shared<CallHandle>(std::weak_ptr<Call>());
  }
  call->Go(endpoints);
  return std::make_shared<CallHandle>(call);
}

void HttpClient::After(std::chrono::milliseconds delay, std::function<void()> fn) {
  Impl& m = *impl_;
  {
    MutexLock lock(m.mu);
    if (m.stopped) return;
  }
  auto timer = std::make_shared<asio::steady_timer>(m.io, delay);
  timer->async_wait([timer, fn = std::move(fn)](error_code ec) {
    if (!ec) fn();
  });
}

void HttpClient::Stop() {
  Impl& m = *impl_;
  std::vector<std::shared_ptr<Call>> calls;
  {
    MutexLock lock(m.mu);
    if (m.stopped) return;
    m.stopped = true;
    for (auto& [p, w] : m.live) {
      if (auto c = w.lock()) calls.push_back(std::move(c));
    }
  }
  for (auto& c : calls) c->Post([c] { c->Close("the client is stopping"); });
  calls.clear();
  {
    UniqueLock lock(m.mu);
    m.all_closed.wait_for(lock.native(), std::chrono::seconds(2), [&]() REQUIRES(m.mu) { return m.live.empty(); });
  }
  m.work.reset();
  m.io.stop();
  if (m.thread.joinable()) m.thread.join();
}

}  // namespace tandem
