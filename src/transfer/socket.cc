#include "transfer/socket.h"

#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/mutex.h"
#include "transfer/address.h"
#include "transfer/messages.h"
#include "transfer/socket_frame.h"
#include "transfer/socket_gate.h"

namespace tandem::transfer {

using namespace socket_internal;  // the frame format

namespace {


constexpr uint64_t kMaxMessageBytes = kHandoffHeaderBytes + kMaxHandoffBodyBytes;
constexpr char kKeyMagic[4] = {'T', 'S', 'K', '1'};  // then the region id, u64
constexpr auto kConnectTimeout = std::chrono::seconds(5);

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Sends every byte of the iovecs (partial writes continued). False on error.
bool SendAll(int fd, iovec* iov, int n) {
  while (n > 0) {
    msghdr m{};
    m.msg_iov = iov;
    m.msg_iovlen = size_t(n);
    const ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    size_t done = size_t(w);
    while (n > 0 && done >= iov->iov_len) {
      done -= iov->iov_len;
      ++iov;
      --n;
    }
    if (n > 0) {
      iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + done;
      iov->iov_len -= done;
    }
  }
  return true;
}

bool RecvAll(int fd, uint8_t* at, size_t n) {
  while (n > 0) {
    const ssize_t r = recv(fd, at, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    at += r;
    n -= size_t(r);
  }
  return true;
}

}  // namespace

struct SocketTransport::Impl {
  Mutex mu;
  std::map<uint64_t, std::pair<uint8_t*, size_t>> regions GUARDED_BY(mu);
  uint64_t next_region GUARDED_BY(mu) = 1;
  uint64_t next_id GUARDED_BY(mu) = 1;
  std::vector<std::weak_ptr<class SocketConnection>> connections GUARDED_BY(mu);
  int live_threads GUARDED_BY(mu) = 0;
  std::condition_variable threads_cv;
  int listen_fd = -1;
  int port = -1;
  std::atomic<bool> stop{false};
  std::thread acceptor;
  std::optional<FirstMessageGate> gate;  // set before Listen; then read by the acceptor only
  RefusalCounter refusals{"tcp"};

  ~Impl() {
    MutexLock lock(mu);  // no thread is left; the analysis wants it said
    for (auto& [id, r] : regions) munmap(r.first, r.second);
  }
  // Where a put of `length` bytes at `offset` into region `id` lands, or null.
  uint8_t* Target(uint64_t id, uint64_t offset, uint64_t length) {
    MutexLock lock(mu);
    auto it = regions.find(id);
    if (it == regions.end() || offset > it->second.second || length > it->second.second - offset) return nullptr;
    return it->second.first + offset;
  }
  void ThreadStarted() {
    MutexLock lock(mu);
    ++live_threads;
  }
  void ThreadEnded() {
    MutexLock lock(mu);
    --live_threads;
    threads_cv.notify_all();
  }
};

class SocketConnection : public Connection, public std::enable_shared_from_this<SocketConnection> {
 public:
  SocketConnection(std::shared_ptr<SocketTransport::Impl> t, uint64_t id, ConnectionHandlers handlers)
      : t_(std::move(t)), id_(id), handlers_(std::move(handlers)) {}
  ~SocketConnection() override {
    if (fd_ >= 0) close(fd_);
  }
  void set_handlers(ConnectionHandlers h) { handlers_ = std::move(h); }

  // Starts the threads; `fd` < 0: connect to `peer` first (on the reader
  // thread). `first_message`: one the listener's gate already read, delivered
  // before anything else.
  void Start(int fd, sockaddr_in peer, std::vector<uint8_t> first_message = {}) {
    {
      MutexLock lock(mu_);
      fd_ = fd;
      connected_ = fd >= 0;
    }
    first_message_ = std::move(first_message);
    auto self = shared_from_this();
    t_->ThreadStarted();
    t_->ThreadStarted();
    std::thread([self, peer] { self->RunReader(peer); self->t_->ThreadEnded(); }).detach();
    std::thread([self] { self->RunWriter(); self->t_->ThreadEnded(); }).detach();
  }

  uint64_t id() const override { return id_; }
  bool alive() const override { return alive_.load(); }

  Status Put(const void* src, size_t bytes, const RemoteKey& key, uint64_t offset) override {
    if (key.blob.size() != 12 || std::memcmp(key.blob.data(), kKeyMagic, 4) != 0) {
      return InvalidArgument("not a TCP transport remote key (the peers use different --transport settings?)");
    }
    if (offset > key.size || bytes > key.size - offset) {
      return OutOfRange("put of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                        " exceeds the " + std::to_string(key.size) + "-byte remote region");
    }
    return Post({kPutFrame, GetLe(key.blob.data() + 4, 8), offset, bytes}, src, {});
  }

  Status Send(std::vector<uint8_t> message) override {
    if (message.size() > kMaxMessageBytes) return InvalidArgument("message over the transport's cap");
    const uint64_t n = message.size();
    return Post({kMessageFrame, 0, 0, n}, nullptr, std::move(message));
  }

  Status Flush(Clock::time_point deadline) override {
    uint64_t seq = 0;
    {
      MutexLock lock(mu_);
      seq = ++flushes_posted_;
    }
    TANDEM_RETURN_IF_ERROR(Post({kFlushFrame, seq, 0, 0}, nullptr, {}));
    UniqueLock lock(mu_);
    if (!cv_.wait_until(lock.native(), deadline, [&]() REQUIRES(mu_) { return flushes_acked_ >= seq || !alive_; })) {
      return Status(StatusCode::kDeadlineExceeded, "flush did not complete before its deadline");
    }
    if (flushes_acked_ >= seq) return Status::Ok();
    return Unavailable("TCP connection " + std::to_string(id_) + " closed during a flush: " + why_);
  }

  // Stops the reader landing anything before returning (the fence). Messages
  // already posted (a refusal's Hello, say) still go out; puts not yet sent
  // never do. Then both threads end.
  void Close() override {
    UniqueLock lock(mu_);
    if (closed_) return;
    closed_ = true;
    if (why_.empty()) {
      why_ = "closed by this side";
      why_code_ = StatusCode::kAborted;
    }
    cv_.notify_all();
    // The reader may be receiving a put into our memory, and the writer may be
    // sending the caller's bytes of puts: wait until neither is (both check
    // closed_ before each batch), so no source or region is touched once this
    // returns. Never called with a put in progress on the reader thread
    // itself: handlers run between frames. A peer that does not read blocks
    // the writer: after a grace period the socket is shut down under it.
    auto idle = [&]() REQUIRES(mu_) { return !in_put_ && !sending_puts_; };
    if (!cv_.wait_for(lock.native(), std::chrono::seconds(2), idle)) {
      if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
      cv_.wait(lock.native(), idle);
    }
  }

  bool WaitReleased(Clock::time_point deadline) override {
    UniqueLock lock(mu_);
    return cv_.wait_until(lock.native(), deadline, [&]() REQUIRES(mu_) { return closed_ && writer_done_; });
  }

 private:
  struct Item {
    Frame frame;
    const void* src = nullptr;       // kPutFrame: the caller's bytes
    std::vector<uint8_t> owned;      // kMessageFrame
  };

  // Messages (and flush acks) may overtake puts — the transport contract
  // orders messages only among themselves — so a heartbeat never waits behind
  // a backlog of pages. Flush markers stay behind the puts they cover.
  Status Post(Frame f, const void* src, std::vector<uint8_t> owned) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!alive_ || closed_) return Unavailable("TCP connection " + std::to_string(id_) + " is closed: " + why_);
    auto& q = f.type == kMessageFrame || f.type == kFlushAckFrame ? control_ : queue_;
    q.push_back({f, src, std::move(owned)});
    cv_.notify_all();
    return Status::Ok();
  }

  // code: kNotFound when the connection was refused (nothing listens there).
  void FailLocked(const std::string& why, StatusCode code = StatusCode::kUnavailable) REQUIRES(mu_) {
    if (alive_.exchange(false)) {
      why_ = why;
      why_code_ = code;
    }
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
    cv_.notify_all();
  }
  void Fail(const std::string& why) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    FailLocked(why);
  }

  bool ConnectTo(sockaddr_in peer) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) return Fail(Errno("socket")), false;
    {
      MutexLock lock(mu_);
      fd_ = fd;
      if (!alive_) return false;
    }
    int rc = connect(fd, reinterpret_cast<const sockaddr*>(&peer), sizeof(peer));
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, int(std::chrono::milliseconds(kConnectTimeout).count()));
      int err = 0;
      socklen_t len = sizeof(err);
      if (rc == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) {
        rc = 0;
      } else {
        errno = rc == 0 ? ETIMEDOUT : (err != 0 ? err : errno);
        rc = -1;
      }
    }
    if (rc != 0) {
      const bool refused = errno == ECONNREFUSED;
      const std::string why = Errno("connect");
      MutexLock lock(mu_);
      FailLocked(why, refused ? StatusCode::kNotFound : StatusCode::kUnavailable);
      return false;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    MutexLock lock(mu_);
    connected_ = true;
    cv_.notify_all();
    return alive_;
  }

  // Sends what is queued in batches of up to kBatch frames per sendmsg,
  // messages first. After Close, sends the messages still queued (bounded by
  // a send timeout), drops the puts, and ends the connection.
  void RunWriter() {
    constexpr size_t kBatch = 64;
    std::vector<Item> batch;
    std::vector<std::array<uint8_t, kFrameHeaderBytes>> headers(kBatch);
    std::vector<iovec> iov;
    UniqueLock lock(mu_);
    cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return connected_ || !alive_ || closed_; });
    for (;;) {
      cv_.wait(lock.native(),
               [&]() REQUIRES(mu_) { return !control_.empty() || !queue_.empty() || !alive_ || closed_; });
      if (!alive_ || (closed_ && (control_.empty() || !connected_))) break;
      batch.clear();
      while (!control_.empty() && batch.size() < kBatch) {
        batch.push_back(std::move(control_.front()));
        control_.pop_front();
      }
      while (!closed_ && !queue_.empty() && batch.size() < kBatch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      const int fd = fd_;
      sending_puts_ = std::any_of(batch.begin(), batch.end(), [](const Item& i) { return i.frame.type == kPutFrame; });
      if (closed_) {
        const timeval one_second{1, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &one_second, sizeof(one_second));
      }
      lock.Unlock();
      iov.clear();
      for (size_t i = 0; i < batch.size(); ++i) {
        const Frame& f = batch[i].frame;
        uint8_t* h = headers[i].data();
        PutLe(h, f.type, 4);
        PutLe(h + 4, 0, 4);
        PutLe(h + 8, f.a, 8);
        PutLe(h + 16, f.b, 8);
        PutLe(h + 24, f.length, 8);
        iov.push_back({h, kFrameHeaderBytes});
        if (f.type == kPutFrame) iov.push_back({const_cast<void*>(batch[i].src), f.length});
        if (f.type == kMessageFrame) iov.push_back({batch[i].owned.data(), batch[i].owned.size()});
      }
      const bool ok = SendAll(fd, iov.data(), int(iov.size()));
      lock.Lock();
      sending_puts_ = false;  // the callers' bytes are no longer read
      cv_.notify_all();
      if (!ok) {
        FailLocked(Errno("send"));
        break;
      }
    }
    queue_.clear();
    control_.clear();
    FailLocked(why_.empty() ? "closed" : why_);
    writer_done_ = true;
    cv_.notify_all();
  }

  void RunReader(sockaddr_in peer) {
    bool ok = true, connected = false;
    {
      MutexLock lock(mu_);
      ok = alive_ && !closed_;
      connected = connected_;
    }
    if (ok && !connected) ok = ConnectTo(peer);
    if (ok) {
      MutexLock lock(mu_);
      reader_fd_ = fd_;
    }
    if (ok && !first_message_.empty()) ok = Deliver(std::move(first_message_));
    while (ok) ok = ReadFrame();
    {
      UniqueLock lock(mu_);
      if (closed_) {
        // Closed by its owner: the writer sends what was said last, then ends it.
        cv_.wait(lock.native(), [&]() REQUIRES(mu_) { return writer_done_; });
      } else {
        FailLocked("the peer closed the connection");
      }
    }
    Status why;
    {
      MutexLock lock(mu_);
      why = Status(why_code_, "TCP connection " + std::to_string(id_) + ": " + why_);
    }
    if (handlers_.on_close) handlers_.on_close(*this, why);
  }

  // Reads exactly n bytes into `at`: first what the read-ahead buffer holds,
  // the rest straight from the socket (big payloads skip the buffer).
  bool Read(uint8_t* at, size_t n) {
    const size_t buffered = std::min(n, ahead_end_ - ahead_begin_);
    std::memcpy(at, ahead_.data() + ahead_begin_, buffered);
    ahead_begin_ += buffered;
    at += buffered;
    n -= buffered;
    if (n == 0) return true;
    if (n >= ahead_.size() / 2) return RecvAll(reader_fd_, at, n);
    // Small: refill the buffer (with whatever else has arrived) and copy.
    ahead_begin_ = ahead_end_ = 0;
    while (ahead_end_ < n) {
      const ssize_t r = recv(reader_fd_, ahead_.data() + ahead_end_, ahead_.size() - ahead_end_, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      ahead_end_ += size_t(r);
    }
    std::memcpy(at, ahead_.data(), n);
    ahead_begin_ = n;
    return true;
  }

  bool Deliver(std::vector<uint8_t> m) {
    {
      MutexLock lock(mu_);
      if (closed_) return true;  // given up by its owner: nothing more is delivered
    }
    if (handlers_.on_message) handlers_.on_message(*this, std::move(m));
    return true;
  }

  bool ReadFrame() {
    uint8_t header[kFrameHeaderBytes];
    if (!Read(header, kFrameHeaderBytes)) return false;
    Frame f{uint32_t(GetLe(header, 4)), GetLe(header + 8, 8), GetLe(header + 16, 8), GetLe(header + 24, 8)};
    switch (f.type) {
      case kPutFrame: {
        uint8_t* dst = t_->Target(f.a, f.b, f.length);
        if (!dst) return Fail("a put outside every region this engine announced"), false;
        if (handlers_.accept_put && !handlers_.accept_put(*this, f.b, f.length)) {
          return Fail("a put of " + std::to_string(f.length) + " bytes at offset " + std::to_string(f.b) +
                      " outside the pages of this connection's open handoffs"),
                 false;
        }
        {
          MutexLock lock(mu_);
          if (closed_) return false;  // the fence: nothing lands after Close (the writer ends the connection)
          in_put_ = true;
        }
        const bool ok = Read(dst, size_t(f.length));
        MutexLock lock(mu_);
        in_put_ = false;
        cv_.notify_all();
        return ok;
      }
      case kMessageFrame: {
        if (f.length > kMaxMessageBytes) return Fail("a message over the cap"), false;
        std::vector<uint8_t> m(size_t(f.length));
        if (!Read(m.data(), m.size())) return false;
        return Deliver(std::move(m));
      }
      case kFlushFrame:  // every put before it has landed: TCP kept the order
        return Post({kFlushAckFrame, f.a, 0, 0}, nullptr, {}).ok();
      case kFlushAckFrame: {
        MutexLock lock(mu_);
        if (f.a > flushes_posted_) {
          FailLocked("an acknowledgement of a flush that was never asked for");
          return false;
        }
        flushes_acked_ = std::max(flushes_acked_, f.a);
        cv_.notify_all();
        return true;
      }
    }
    return Fail("an unknown frame type " + std::to_string(f.type)), false;
  }

  const std::shared_ptr<SocketTransport::Impl> t_;
  const uint64_t id_;
  ConnectionHandlers handlers_;  // set before Start, then read only by the reader thread
  std::atomic<bool> alive_{true};
  Mutex mu_;
  std::condition_variable cv_;
  int fd_ GUARDED_BY(mu_) = -1;           // set once; the reader thread keeps its own copy
  bool connected_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;        // Close() was called
  bool in_put_ GUARDED_BY(mu_) = false;        // the reader is writing into a region
  bool sending_puts_ GUARDED_BY(mu_) = false;  // the writer is sending callers' put bytes
  std::deque<Item> queue_ GUARDED_BY(mu_);     // puts and flush markers, in order
  std::deque<Item> control_ GUARDED_BY(mu_);   // messages and flush acks (go first)
  bool writer_done_ GUARDED_BY(mu_) = false;   // nothing more is sent
  uint64_t flushes_posted_ GUARDED_BY(mu_) = 0;
  uint64_t flushes_acked_ GUARDED_BY(mu_) = 0;
  std::string why_ GUARDED_BY(mu_);            // why it is not alive
  StatusCode why_code_ GUARDED_BY(mu_) = StatusCode::kUnavailable;
  int reader_fd_ = -1;                         // reader thread only: fd_, once connected
  std::vector<uint8_t> first_message_;  // set before the threads start, then the reader thread's
  std::vector<uint8_t> ahead_ = std::vector<uint8_t>(size_t(64) << 10);  // reader thread only
  size_t ahead_begin_ = 0, ahead_end_ = 0;                               // reader thread only
};

SocketTransport::SocketTransport() : impl_(std::make_shared<Impl>()) {}

SocketTransport::~SocketTransport() {
  impl_->stop = true;
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  if (impl_->listen_fd >= 0) close(impl_->listen_fd);
  std::vector<std::shared_ptr<SocketConnection>> open;
  {
    MutexLock lock(impl_->mu);
    for (auto& w : impl_->connections) {
      if (auto c = w.lock()) open.push_back(std::move(c));
    }
  }
  for (auto& c : open) c->Close();
  open.clear();
  // The threads run the handlers, which may reach the owner's state: none may outlive us.
  UniqueLock lock(impl_->mu);
  impl_->threads_cv.wait(lock.native(), [&]() REQUIRES(impl_->mu) { return impl_->live_threads == 0; });
}

StatusOr<Region> SocketTransport::AllocateRegion(size_t bytes) {
  if (bytes == 0) return InvalidArgument("a region needs at least one byte");
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return ResourceExhausted(Errno(("mmap of " + std::to_string(bytes) + " bytes").c_str()));
  MutexLock lock(impl_->mu);
  const uint64_t id = impl_->next_region++;
  impl_->regions[id] = {static_cast<uint8_t*>(p), bytes};
  Region r;
  r.data = static_cast<uint8_t*>(p);
  r.size = bytes;
  r.key.blob.assign(kKeyMagic, kKeyMagic + 4);
  r.key.blob.resize(12);
  PutLe(r.key.blob.data() + 4, id, 8);
  r.key.size = bytes;
  return r;
}

Status SocketTransport::Listen(const std::string& address,
                               std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept) {
  TANDEM_ASSIGN_OR_RETURN(sockaddr_in sa, ParseHostPort(address));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Unavailable(Errno("socket"));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(sa);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const std::string why = Errno(("cannot listen on " + address).c_str());
    close(fd);
    return Unavailable(why);
  }
  impl_->listen_fd = fd;
  impl_->port = ntohs(sa.sin_port);
  std::shared_ptr<Impl> t = impl_;
  auto start = [t, on_accept = std::move(on_accept)](int c, std::vector<uint8_t> first_message) {
    const int yes = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    uint64_t id = 0;
    {
      MutexLock lock(t->mu);
      id = t->next_id++;
    }
    auto conn = std::make_shared<SocketConnection>(t, id, ConnectionHandlers{});
    conn->set_handlers(on_accept(conn));
    {
      MutexLock lock(t->mu);
      std::erase_if(t->connections, [](const auto& w) { return w.expired(); });
      t->connections.push_back(conn);
    }
    conn->Start(c, {}, std::move(first_message));
  };
  impl_->acceptor = std::thread([t, fd, start = std::move(start)] {
    // With a gate, connections wait in `pending` (no thread of their own)
    // until their first message is admitted.
    std::optional<PendingPeers> pending;
    if (t->gate) pending.emplace(*t->gate, &t->refusals);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);  // accept until the queue is empty, never blocking
    std::vector<pollfd> fds;
    while (!t->stop) {
      fds.assign(1, pollfd{fd, POLLIN, 0});
      if (pending) pending->AppendPollFds(&fds);
      if (poll(fds.data(), fds.size(), 100) < 0 && errno != EINTR) continue;
      if (pending) {
        for (auto& a : pending->Service(fds.data() + 1, fds.size() - 1)) start(a.fd, std::move(a.first_message));
      }
      if (!(fds[0].revents & POLLIN)) continue;
      for (int accepted = 0; accepted < 64; ++accepted) {  // what is queued, a bounded batch at a time
        const int c = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | (pending ? SOCK_NONBLOCK : 0));
        if (c < 0) break;
        if (pending) {
          pending->Add(c);
        } else {
          start(c, {});
        }
      }
    }
  });
  return Status::Ok();
}

std::map<std::string, int64_t> SocketTransport::refusals() const { return impl_->refusals.counts(); }

Status SocketTransport::SetFirstMessageGate(FirstMessageGate gate) {
  if (impl_->listen_fd >= 0) return FailedPrecondition("the gate is set before Listen");
  impl_->gate = std::move(gate);
  return Status::Ok();
}

StatusOr<std::shared_ptr<Connection>> SocketTransport::Connect(const std::string& address,
                                                               ConnectionHandlers handlers) {
  TANDEM_ASSIGN_OR_RETURN(sockaddr_in sa, ParseHostPort(address));
  std::shared_ptr<SocketConnection> conn;
  {
    MutexLock lock(impl_->mu);
    conn = std::make_shared<SocketConnection>(impl_, impl_->next_id++, std::move(handlers));
    std::erase_if(impl_->connections, [](const auto& w) { return w.expired(); });
    impl_->connections.push_back(conn);
  }
  conn->Start(-1, sa);
  return std::shared_ptr<Connection>(conn);
}

int SocketTransport::listen_port() const { return impl_->port; }

}  // namespace tandem::transfer
