// One client connection of HttpCore (server/http_core.h): requests read one
// at a time within their deadlines, answers written in slices, hang-ups seen
// by reading ahead. Everything runs on the connection's strand; Reply posts
// onto it.
#include <deque>

#include "server/http_core_internal.h"

namespace tandem::http_internal {

class Connection final : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpCore::Impl& core, tcp::socket socket, bool overflow)
      : core_(core),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()),
        // Framing the parser has not consumed yet (a header, a chunk line,
        // read-ahead): bounded, so a chunk line without an end cannot grow it.
        buffer_(core.limits.max_header_bytes + kMaxPipelinedBytes + kReadAhead),
        overflow_(overflow) {
    ++core_.open;
  }
  ~Connection() { --core_.open; }

  void Start() {
    {
      MutexLock lock(core_.mu);
      core_.live[this] = weak_from_this();
    }
    error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    ReadHeader();
  }

  template <typename F>
  void Post(F&& f) {
    asio::post(socket_.get_executor(), std::forward<F>(f));
  }

  // --- answers (on the strand; `seq` names the request they answer) ---
  void DoSend(uint64_t seq, int status, std::string content_type, std::string body, HttpHeaders headers) {
    if (seq != seq_ || state_ != State::kHandling || answering_) return;
    answering_ = true;
    std::string head = Head(status, headers);
    if (status != 204) {
      head += "Content-Type: " + content_type + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    }
    Enqueue(head + "\r\n");
    if (!head_ && status != 204) Enqueue(std::move(body));
    answer_done_ = true;
    Flush();
  }
  void DoStart(uint64_t seq, int status, std::string content_type, HttpHeaders headers) {
    if (seq != seq_ || state_ != State::kHandling || answering_) return;
    answering_ = true;
    std::string head = Head(status, headers);
    head += "Content-Type: " + content_type + "\r\nTransfer-Encoding: chunked\r\n\r\n";
    Enqueue(std::move(head));
    if (head_) answer_done_ = true;  // the head is the whole answer; writes are dropped
    Flush();
  }
  void DoAbort(uint64_t seq) {
    if (seq != seq_ || state_ != State::kHandling) return;
    on_hang_up_ = nullptr;  // the handler ended it: not a hang-up
    Shut();
  }
  void DoWrite(uint64_t seq, std::string chunk, size_t counted) {
    if (seq != seq_ || state_ != State::kHandling || !answering_ || answer_done_) {
      queued_ -= counted;
      return;
    }
    Enqueue(std::move(chunk), counted);
    Flush();
  }
  void DoEnd(uint64_t seq) {
    if (seq != seq_ || state_ != State::kHandling || !answering_ || answer_done_) return;
    Enqueue("0\r\n\r\n");
    answer_done_ = true;
    Flush();
  }
  void DoOnHangUp(uint64_t seq, std::function<void()> callback) {
    if (seq != seq_ || state_ == State::kClosed) return callback();  // gone, or answered already
    on_hang_up_ = std::move(callback);
  }
  // Server stop: an answer already whole is written out first (its bytes
  // were posted before this), then the connection closes; others close now.
  void DoShut() {
    stopping_ = true;
    if (state_ == State::kHandling && answer_done_ && (writing_ || !out_.empty())) return;
    Shut();
  }

  bool gone() const { return gone_.load(); }
  std::atomic<size_t>& queued() { return queued_; }
  const HttpLimits& limits() const { return core_.limits; }

 private:
  enum class State { kHeader, kBody, kHandling, kLingering, kClosed };

  void ReadHeader() {
    state_ = State::kHeader;
    answering_ = answer_done_ = head_ = false;
    on_hang_up_ = nullptr;
    origin_.clear();
    timed_out_ = false;
    parser_.emplace();
    parser_->header_limit(uint32_t(std::min<size_t>(core_.limits.max_header_bytes, UINT32_MAX)));
    parser_->body_limit(core_.limits.max_body_bytes);
    Arm(first_ || overflow_ ? core_.limits.header_timeout : core_.limits.idle_timeout);
    first_ = false;
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](error_code ec, size_t) { self->OnHeader(ec); });
  }

  void OnHeader(error_code ec) {
    if (state_ == State::kClosed) return;
    if (ec) return ReadFailed(ec, "header");
    const auto& msg = parser_->get();
    const std::string path = PathOf(std::string(msg.target()));
    head_ = msg.method() == http::verb::head;
    origin_ = std::string(msg[http::field::origin]);
    const RouteEntry* route = Find(head_ ? "GET" : std::string(msg.method_string()), path);
    if (overflow_ && (route == nullptr || !route->quick)) {
      ++core_.refused;
      return Fail(503, "the server has too many open connections (" + std::to_string(core_.limits.max_connections) +
                           "); retry later");
    }
    if (auto n = parser_->content_length(); n && *n > core_.limits.max_body_bytes) {
      ++core_.too_large;
      return Fail(413, "request body is too large (" + std::to_string(*n) + " bytes; the limit is " +
                           std::to_string(core_.limits.max_body_bytes) + ")");
    }
    if (parser_->is_done()) return Dispatch();
    if (EqualsIgnoreCase(std::string(msg[http::field::expect]), "100-continue")) {
      Enqueue("HTTP/1.1 100 Continue\r\n\r\n");
      Flush();
    }
    state_ = State::kBody;
    Arm(core_.limits.body_timeout);
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
      if (self->state_ == State::kClosed) return;
      if (ec) return self->ReadFailed(ec, "body");
      self->Dispatch();
    });
  }

  void ReadFailed(error_code ec, const char* what) {
    if (timed_out_) {
      ++core_.deadline_closed;
      // A connection that sent nothing of a next request is closed quietly.
      if (!parser_->got_some()) return Shut();
      const auto limit = state_ == State::kBody ? core_.limits.body_timeout : core_.limits.header_timeout;
      return Fail(408, std::string("the request's ") + what + " did not arrive within " + Seconds(limit));
    }
    if (ec == http::error::header_limit) {
      ++core_.too_large;
      return Fail(431, "request headers are too large (the limit is " + std::to_string(core_.limits.max_header_bytes) +
                           " bytes)");
    }
    if (ec == http::error::buffer_overflow) {
      ++core_.too_large;
      return state_ == State::kBody ? Fail(413, "a chunk header or trailer of the request body is too long")
                                    : Fail(431, "request headers are too large (the limit is " +
                                                    std::to_string(core_.limits.max_header_bytes) + " bytes)");
    }
    if (ec == http::error::body_limit) {
      ++core_.too_large;
      return Fail(413, "request body is too large (the limit is " + std::to_string(core_.limits.max_body_bytes) +
                           " bytes)");
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
        ec == asio::error::operation_aborted || !parser_->got_some()) {
      return Shut();
    }
    Fail(400, "malformed HTTP request: " + ec.message());
  }

  static std::string PathOf(const std::string& target) {
    const size_t q = target.find('?');
    return q == std::string::npos ? target : target.substr(0, q);
  }

  const RouteEntry* Find(const std::string& method, const std::string& path) const {
    for (const RouteEntry& r : core_.routes) {
      if (r.method == method && r.path == path) return &r;
    }
    return nullptr;
  }

  void Dispatch();

  // Reads ahead while the request is worked on: the only way to learn that
  // the client hung up before its answer is ready.
  void Watch() {
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](error_code ec, size_t n) {
      self->watching_ = false;
      if (self->state_ == State::kClosed) return;
      if (!ec) {
        self->buffer_.commit(n);
      } else if (ec != asio::error::operation_aborted) {
        return self->Shut();  // the client went away
      }
      if (self->restart_) {
        self->restart_ = false;
        return self->ReadHeader();
      }
      if (self->state_ == State::kHandling && !ec && self->buffer_.size() < kMaxPipelinedBytes) self->Watch();
      // Past that, hang-ups are noticed when the answer is written.
    });
  }

  std::string Head(int status, const HttpHeaders& headers) const {
    std::string h = "HTTP/1.1 " + std::to_string(status) + " " + Reason(status) + "\r\n";
    for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
    for (const auto& [k, v] : core_.access.CorsHeaders(origin_, false)) h += k + ": " + v + "\r\n";
    h += keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    return h;
  }

  // Large pieces are cut into slices, so each write is at most a slice and
  // the write deadline measures progress, not the whole answer.
  void Enqueue(std::string bytes, size_t counted = 0) {
    if (counted == 0) {
      counted = bytes.size();
      queued_ += counted;
    }
    if (bytes.size() <= kWriteSlice) {
      out_bytes_.push_back(counted);
      out_.push_back(std::move(bytes));
      return;
    }
    for (size_t off = 0; off < bytes.size(); off += kWriteSlice) {
      const size_t n = std::min(kWriteSlice, bytes.size() - off);
      out_.push_back(bytes.substr(off, n));
      out_bytes_.push_back(off + n >= bytes.size() ? counted : 0);  // counted once, with the last slice
    }
  }

  void Flush() {
    if (writing_ || state_ == State::kClosed) return;
    if (out_.empty()) {
      if (answer_done_ && state_ == State::kHandling) Answered();
      return;
    }
    writing_ = true;
    std::vector<asio::const_buffer> buffers;
    size_t bytes = 0;
    writing_count_ = 0;
    for (const std::string& piece : out_) {
      if (writing_count_ > 0 && bytes + piece.size() > kWriteSlice) break;
      buffers.emplace_back(asio::buffer(piece));
      bytes += piece.size();
      ++writing_count_;
    }
    const uint64_t gen = ++write_gen_;
    write_timer_.expires_after(core_.limits.write_timeout);
    write_timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
      if (ec || gen != self->write_gen_ || !self->writing_ || self->state_ == State::kClosed) return;
      ++self->core_.deadline_closed;  // the client stopped reading
      self->Shut();
    });
    asio::async_write(socket_, buffers, [self = shared_from_this()](error_code ec, size_t) {
      self->writing_ = false;
      ++self->write_gen_;
      self->write_timer_.cancel();
      for (size_t i = 0; i < self->writing_count_; ++i) {
        self->queued_ -= self->out_bytes_.front();
        self->out_bytes_.pop_front();
        self->out_.pop_front();
      }
      if (self->state_ == State::kClosed) return;
      if (ec) return self->Shut();
      self->Flush();
    });
  }

  // The answer is written whole: the next request, or close.
  void Answered() {
    on_hang_up_ = nullptr;
    ++seq_;  // late calls for this request do nothing
    if (stopping_) return Shut();
    if (!keep_alive_) return Linger();
    if (watching_) {
      restart_ = true;
      error_code ignored;
      socket_.cancel(ignored);  // the watch ends, then reads the next header
      return;
    }
    ReadHeader();
  }

  // An error answer, then close (after reading off what the client still sends).
  void Fail(int status, const std::string& message) {
    if (state_ == State::kClosed) return;
    Disarm();
    state_ = State::kHandling;
    keep_alive_ = false;
    answering_ = true;
    std::string body = ErrorBody(status, message, "");
    std::string head = Head(status, status == 503 ? HttpHeaders{{"Retry-After", "1"}} : HttpHeaders{});
    head += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
    Enqueue(std::move(head) + body);
    answer_done_ = true;
    Flush();
  }

  // Half-close, then discard what the client still sends for a moment, so
  // the answer is not lost to a reset.
  void Linger() {
    state_ = State::kLingering;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    Arm(kLinger);
    Discard();
  }
  void Discard() {
    socket_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](error_code ec, size_t n) {
      if (self->state_ != State::kLingering) return;
      self->discarded_ += n;
      if (ec || self->discarded_ > kMaxLingerBytes) return self->Shut();
      self->Discard();
    });
  }

  void Arm(std::chrono::milliseconds after) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
      if (ec || gen != self->timer_gen_ || self->state_ == State::kClosed) return;
      self->OnDeadline();
    });
  }
  void Disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void OnDeadline() {
    if (state_ == State::kHeader || state_ == State::kBody) {
      timed_out_ = true;
      error_code ignored;
      socket_.cancel(ignored);  // the read ends with operation_aborted: ReadFailed answers 408
      return;
    }
    Shut();  // lingering is over
  }

  void Shut() {
    if (state_ == State::kClosed) return;
    const bool unanswered = state_ == State::kHandling || state_ == State::kBody;
    state_ = State::kClosed;
    gone_ = true;
    Disarm();
    ++write_gen_;
    write_timer_.cancel();
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    if (on_hang_up_) {
      if (unanswered) ++core_.hang_ups;
      auto callback = std::move(on_hang_up_);
      on_hang_up_ = nullptr;
      callback();
    }
    {
      MutexLock lock(core_.mu);
      core_.live.erase(this);
    }
    core_.all_shut.notify_all();
  }

  HttpCore::Impl& core_;
  tcp::socket socket_;
  asio::steady_timer timer_;        // reading: header, body, lingering
  asio::steady_timer write_timer_;  // an answer's bytes making no progress
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kHeader;
  const bool overflow_;
  bool first_ = true, keep_alive_ = true, timed_out_ = false, head_ = false, stopping_ = false;
  bool watching_ = false, restart_ = false;
  bool answering_ = false, answer_done_ = false, writing_ = false;
  uint64_t timer_gen_ = 0, write_gen_ = 0, seq_ = 0;
  std::string origin_;
  std::deque<std::string> out_;
  std::deque<size_t> out_bytes_;
  size_t writing_count_ = 0;
  std::function<void()> on_hang_up_;
  std::array<char, 16384> discard_;
  size_t discarded_ = 0;
  std::atomic<bool> gone_{false};
  std::atomic<size_t> queued_{0};

  friend class Reply;
};

namespace {

// The HttpReply of one request: its calls go to the connection's strand,
// tagged with the request they answer.
class Reply final : public HttpReply {
 public:
  Reply(std::shared_ptr<Connection> conn, uint64_t seq) : conn_(std::move(conn)), seq_(seq) {}

  void Send(int status, std::string_view content_type, std::string body, HttpHeaders headers) override {
    if (started_.exchange(true)) return;
    ended_ = true;
    conn_->Post([c = conn_, seq = seq_, status, ct = std::string(content_type), b = std::move(body),
                 h = std::move(headers)]() mutable { c->DoSend(seq, status, std::move(ct), std::move(b), std::move(h)); });
  }
  void StartStream(int status, std::string_view content_type, HttpHeaders headers) override {
    if (started_.exchange(true)) return;
    streaming_ = true;
    conn_->Post([c = conn_, seq = seq_, status, ct = std::string(content_type), h = std::move(headers)]() mutable {
      c->DoStart(seq, status, std::move(ct), std::move(h));
    });
  }
  bool Write(std::string data) override {
    if (!streaming_ || ended_ || conn_->gone()) return false;
    if (data.empty()) return true;
    char size[24];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    std::string chunk = size + std::move(data) + "\r\n";
    const size_t n = chunk.size();
    if (conn_->queued().load() + n > conn_->limits().max_buffered_bytes) return false;
    conn_->queued() += n;
    conn_->Post([c = conn_, seq = seq_, ch = std::move(chunk), n]() mutable { c->DoWrite(seq, std::move(ch), n); });
    return true;
  }
  void End() override {
    if (!streaming_ || ended_.exchange(true)) return;
    conn_->Post([c = conn_, seq = seq_] { c->DoEnd(seq); });
  }
  void Abort() override {
    ended_ = true;
    conn_->Post([c = conn_, seq = seq_] { c->DoAbort(seq); });
  }
  void OnHangUp(std::function<void()> callback) override {
    conn_->Post([c = conn_, seq = seq_, cb = std::move(callback)]() mutable { c->DoOnHangUp(seq, std::move(cb)); });
  }
  bool gone() const override { return conn_->gone(); }
  bool started() const override { return started_.load(); }

 private:
  std::shared_ptr<Connection> conn_;
  const uint64_t seq_;
  std::atomic<bool> started_{false}, streaming_{false}, ended_{false};
};

}  // namespace

void Connection::Dispatch() {
  Disarm();
  state_ = State::kHandling;
  auto msg = parser_->release();
  keep_alive_ = msg.keep_alive() && !overflow_;
  auto request = std::make_shared<HttpRequest>();
  request->method = std::string(msg.method_string());
  request->target = std::string(msg.target());
  request->path = PathOf(request->target);
  for (const auto& f : msg) request->headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  request->body = std::move(msg.body());
  auto reply = std::make_shared<Reply>(shared_from_this(), seq_);

  const AccessPolicy& access = core_.access;
  if (request->method == "OPTIONS" && !access.cors_origin.empty() && request->path.rfind("/v1/", 0) == 0) {
    auto cors = access.CorsHeaders(origin_, true);
    // The origin is trusted: whatever headers its client asks to send may come.
    const std::string asked = request->Header("Access-Control-Request-Headers");
    if (!cors.empty() && !asked.empty()) cors["Access-Control-Allow-Headers"] = asked;
    HttpHeaders h(cors.begin(), cors.end());
    if (cors.empty()) return SendApiError(*reply, 403, "origin '" + origin_ + "' may not use this server");
    origin_.clear();  // the preflight headers above are the CORS headers
    return reply->Send(204, "text/plain", "", std::move(h));
  }
  const RouteEntry* route = Find(head_ ? "GET" : request->method, request->path);
  if (route == nullptr) return SendApiError(*reply, 404, "no route for " + request->method + " " + request->path);
  switch (access.Check(request->path, request->Header("Authorization"))) {
    case Access::kAllowed:
      break;
    case Access::kForbidden:
      return reply->Send(403, "application/json", ForbiddenAdminJson(), {});
    case Access::kUnauthorized:
      return reply->Send(401, "application/json", UnauthorizedJson(), {{"WWW-Authenticate", "Bearer"}});
  }
  if (route->quick) return RunHandler(core_, route->handler, *request, reply);
  Watch();
  asio::post(*core_.workers, [&core = core_, request, reply, handler = &route->handler] {
    RunHandler(core, *handler, *request, reply);
  });
}

void StartConnection(HttpCore::Impl& core, tcp::socket socket, bool overflow) {
  auto c = std::make_shared<Connection>(core, std::move(socket), overflow);
  c->Post([c] { c->Start(); });
}

void ShutConnection(const std::shared_ptr<Connection>& connection) {
  connection->Post([c = connection] { c->DoShut(); });
}

}  // namespace tandem::http_internal
