#include "transfer/loopback.h"
#include "common/env.h"

#include <cstring>

namespace tandem::transfer {

class LoopbackConnection : public Connection, public std::enable_shared_from_this<LoopbackConnection> {
 public:
  LoopbackConnection(LoopbackNetwork* net, uint64_t id, const LoopbackTransport* owner)
      : net_(net), id_(id), owner_(owner) {}
  const LoopbackTransport* owner() const { return owner_; }
  uint64_t id() const override { return id_; }

  Status Put(const void* src, size_t bytes, const RemoteKey& key, uint64_t offset) override {
    if (key.blob.size() != 8) return InvalidArgument("loopback remote key must be 8 bytes");
    uint64_t region = 0;
    std::memcpy(&region, key.blob.data(), 8);
    MutexLock lock(net_->mu_);
    if (!alive_) return Unavailable("connection " + std::to_string(id_) + " is closed");
    auto it = net_->regions_.find(region);
    if (it == net_->regions_.end()) return InvalidArgument("unknown remote region " + std::to_string(region));
    if (offset > it->second.second || bytes > it->second.second - offset) {
      return OutOfRange("put of " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                        " exceeds the " + std::to_string(it->second.second) + "-byte remote region");
    }
    ++posted_;
    LoopbackNetwork::Op op;
    op.ready = Env::Default().Now() + net_->options_.put_latency;
    op.is_put = true;
    op.from = shared_from_this();
    op.src = src;
    op.bytes = bytes;
    op.dst = it->second.first + offset;
    net_->Enqueue(std::move(op));
    return Status::Ok();
  }

  Status Flush(Clock::time_point deadline) override {
    UniqueLock lock(net_->mu_);
    const uint64_t target = posted_;
    if (!net_->cv_.wait_until(lock.native(), deadline, [&]() REQUIRES(net_->mu_) { return landed_ >= target || !alive_; })) {
      return Status(StatusCode::kDeadlineExceeded, "flush did not complete before its deadline");
    }
    return landed_ >= target ? Status::Ok() : Unavailable("connection closed during flush");
  }

  Status Send(std::vector<uint8_t> message) override {
    MutexLock lock(net_->mu_);
    auto peer = peer_.lock();
    if (!alive_ || !peer) return Unavailable("connection " + std::to_string(id_) + " is closed");
    LoopbackNetwork::Op op;
    op.ready = Env::Default().Now() + net_->options_.message_latency;
    op.is_put = false;
    op.to = peer;
    op.message = std::move(message);
    net_->Enqueue(std::move(op));
    return Status::Ok();
  }

  bool alive() const override {
    MutexLock lock(net_->mu_);
    return alive_;
  }

  // Close drops this connection's queued puts under the network lock.
  bool WaitReleased(Clock::time_point) override {
    MutexLock lock(net_->mu_);
    return !alive_;
  }

  void Close() override {
    MutexLock lock(net_->mu_);
    CloseLocked(Status(StatusCode::kAborted, "connection closed by this side"), Unavailable("peer closed the connection"));
  }

  // Both ends die at once; queued puts of either end are dropped under the
  // network lock, so none can land after this returns.
  void CloseLocked(const Status& mine, const Status& theirs) REQUIRES(net_->mu_) {
    if (!alive_) return;
    auto peer = peer_.lock();
    alive_ = false;
    if (peer) peer->alive_ = false;
    net_->DropPutsOf(this, peer.get());
    net_->live_.erase(id_);
    if (peer) net_->live_.erase(peer->id_);
    for (auto& [conn, status] : {std::pair{shared_from_this(), mine}, std::pair{peer, theirs}}) {
      if (!conn) continue;
      LoopbackNetwork::Op op;
      op.ready = Env::Default().Now();
      op.to = conn;
      op.close_event = true;
      op.close_status = status;
      net_->Enqueue(std::move(op));
    }
    net_->cv_.notify_all();
  }

  LoopbackNetwork* net_;  // outlives every connection
  const uint64_t id_;
  const LoopbackTransport* const owner_;  // the transport it belongs to (its handlers die with it)
  std::weak_ptr<LoopbackConnection> peer_;
  ConnectionHandlers handlers_;
  // Guarded by net_->mu_ (the network's, shared with the peer: clang cannot
  // prove peer->net_ == net_, so these stay a comment).
  bool alive_ = true;
  uint64_t posted_ = 0, landed_ = 0;
};

LoopbackNetwork::LoopbackNetwork(LoopbackOptions options) : options_(options) {
  thread_ = std::thread([this] { Run(); });
}

LoopbackNetwork::~LoopbackNetwork() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  queue_.clear();
  live_.clear();
}

void LoopbackNetwork::Enqueue(Op op) {
  op.seq = next_seq_++;
  const auto key = std::make_pair(op.ready, op.seq);
  queue_.emplace(key, std::move(op));
  cv_.notify_all();
}

void LoopbackNetwork::DropPutsOf(const LoopbackConnection* a, const LoopbackConnection* b) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    const bool drop = it->second.is_put && (it->second.from.get() == a || it->second.from.get() == b);
    it = drop ? queue_.erase(it) : std::next(it);
  }
}

void LoopbackNetwork::Run() {
  UniqueLock lock(mu_);
  while (!stop_) {
    if (queue_.empty()) {
      cv_.wait(lock.native());
      continue;
    }
    const auto ready = queue_.begin()->first.first;
    if (Env::Default().Now() < ready) {
      cv_.wait_until(lock.native(), ready);
      continue;
    }
    Op op = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    if (op.is_put) {
      std::memcpy(op.dst, op.src, op.bytes);  // under mu_: Close cannot race a landing put
      ++op.from->landed_;
      cv_.notify_all();
      continue;
    }
    // Handlers run without the lock so they may call back into the transport;
    // their copy goes before the lock is taken again (what it holds may take it).
    {
      ConnectionHandlers handlers = op.to->handlers_;
      running_owner_ = op.to->owner();
      lock.Unlock();
      if (op.close_event) {
        if (handlers.on_close) handlers.on_close(*op.to, op.close_status);
      } else if (handlers.on_message) {
        handlers.on_message(*op.to, std::move(op.message));
      }
    }
    lock.Lock();
    running_owner_ = nullptr;
    cv_.notify_all();
  }
}

LoopbackTransport::LoopbackTransport(std::shared_ptr<LoopbackNetwork> network) : net_(std::move(network)) {
  MutexLock lock(net_->mu_);
  net_->transports_.insert(this);
}

// None of its connections' handlers runs once this returns, whatever events
// were still queued for them (they point into its owner, which goes next).
// Its connections stay open: the peer hears nothing, as before.
LoopbackTransport::~LoopbackTransport() {
  std::vector<ConnectionHandlers> cleared;  // destroyed after the lock is let go
  UniqueLock lock(net_->mu_);
  net_->transports_.erase(this);
  for (uint64_t id : region_ids_) net_->regions_.erase(id);
  for (const auto& a : addresses_) net_->listeners_.erase(a);
  std::vector<std::shared_ptr<LoopbackConnection>> mine;
  for (const auto& [id, c] : net_->live_) {
    if (c->owner() == this) mine.push_back(c);
  }
  for (auto& [key, op] : net_->queue_) {
    if (op.to && op.to->owner() == this) mine.push_back(op.to);
  }
  for (auto& c : mine) cleared.push_back(std::exchange(c->handlers_, ConnectionHandlers{}));
  if (std::this_thread::get_id() != net_->thread_.get_id()) {  // (a handler may destroy its own transport)
    net_->cv_.wait(lock.native(), [&]() REQUIRES(net_->mu_) {
      return net_->running_owner_ != this && net_->accepting_[this] == 0;
    });
  }
  net_->accepting_.erase(this);
}

StatusOr<Region> LoopbackTransport::AllocateRegion(size_t bytes) {
  auto memory = std::make_unique<uint8_t[]>(bytes);
  Region r;
  r.data = memory.get();
  r.size = bytes;
  MutexLock lock(net_->mu_);
  const uint64_t id = net_->next_region_++;
  net_->regions_[id] = {r.data, bytes};
  r.key.blob.resize(8);
  std::memcpy(r.key.blob.data(), &id, 8);
  r.key.size = bytes;
  region_ids_.push_back(id);
  memory_.push_back(std::move(memory));
  return r;
}

Status LoopbackTransport::Listen(const std::string& address,
                                 std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept) {
  MutexLock lock(net_->mu_);
  if (!net_->listeners_.emplace(address, LoopbackNetwork::Listener{std::move(on_accept), this}).second) {
    return Unavailable("loopback address '" + address + "' is already in use");
  }
  addresses_.push_back(address);
  return Status::Ok();
}

StatusOr<std::shared_ptr<Connection>> LoopbackTransport::Connect(const std::string& address,
                                                                 ConnectionHandlers handlers) {
  std::function<ConnectionHandlers(std::shared_ptr<Connection>)> accept;
  std::shared_ptr<LoopbackConnection> mine, theirs;
  {
    MutexLock lock(net_->mu_);
    auto it = net_->listeners_.find(address);
    if (it == net_->listeners_.end()) return Unavailable("nothing listens at loopback address '" + address + "'");
    accept = it->second.on_accept;
    mine = std::make_shared<LoopbackConnection>(net_.get(), net_->next_connection_++, this);
    theirs = std::make_shared<LoopbackConnection>(net_.get(), net_->next_connection_++, it->second.owner);
    // The network keeps both ends alive until they are closed, as a real
    // transport keeps an accepted endpoint whether or not anyone holds it.
    net_->live_[mine->id()] = mine;
    net_->live_[theirs->id()] = theirs;
    mine->peer_ = theirs;
    theirs->peer_ = mine;
    mine->handlers_ = std::move(handlers);
    ++net_->accepting_[theirs->owner()];  // its transport waits for this accept before it goes
  }
  ConnectionHandlers accepted = accept(theirs);
  {
    MutexLock lock(net_->mu_);
    if (--net_->accepting_[theirs->owner()] == 0) net_->cv_.notify_all();
    // Not for a listener whose transport is going: its handlers die with it.
    if (net_->transports_.count(theirs->owner()) > 0) std::swap(theirs->handlers_, accepted);
  }  // (`accepted`, when not installed, goes without the lock)
  return std::shared_ptr<Connection>(mine);
}

}  // namespace tandem::transfer
