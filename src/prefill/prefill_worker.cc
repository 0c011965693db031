#include "prefill/prefill_worker.h"

#include <cstdio>

#include "transfer/handshake.h"

namespace tandem {

using transfer::Clock;

PrefillWorker::PrefillWorker(const Model& model, const CacheSpec& spec, int threads, int64_t pool_pages,
                             PrefillOptions options)
    : spec_(spec),
      options_(options),
      instance_id_(transfer::NewInstanceId()),
      weights_identity_(WeightsIdentity(model)),
      threads_(threads),
      pool_(spec_.registry, int(model.config().n_layers), pool_pages),
      sender_(model, spec_, threads_, pool_, options.sender) {
  thread_ = std::thread([this] { Run(); });
  heartbeat_thread_ = std::thread([this] { RunHeartbeats(); });
}

PrefillWorker::~PrefillWorker() { Stop(); }

std::string PrefillWorker::layout_fingerprint() const { return pool_.layout().Fingerprint(); }

PrefillWorker::Stats PrefillWorker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.connections = int64_t(peers_.size());
  s.queued = int64_t(queue_.size());
  // The pool is touched only by the worker thread while a handoff runs; the
  // count is exact whenever no handoff is running.
  s.cached_pages = sender_.cached_pages();
  s.pages_in_use = pool_.used_pages() - s.cached_pages;
  s.cached_tokens = sender_.cached_tokens();
  return s;
}

void PrefillWorker::Refuse(transfer::Connection& c, uint64_t handoff_id, const std::string& why) {
  ++stats_.refused;
  (void)c.Send(Abort{handoff_id, why}.Encode());
}

void PrefillWorker::OnAccept(std::shared_ptr<transfer::Connection> connection) {
  std::lock_guard<std::mutex> lock(mu_);
  Peer& peer = peers_[connection->id()];
  peer.connection = std::move(connection);
  peer.last_heard = Clock::now();  // silent from here on counts too
}

// Accepts or refuses a decode engine's Hello; a refused connection, and the
// earlier connections of a decode instance that reconnected, are closed.
void PrefillWorker::OnHello(Peer& peer, const std::vector<uint8_t>& bytes) {
  auto hello = Hello::Decode(bytes);
  const uint64_t theirs = hello.ok() ? hello->instance_id : 0;
  const Hello mine{"prefill", layout_fingerprint(), weights_identity_, instance_id_, theirs};
  Status st = hello.ok() ? transfer::CheckHello(mine, *hello) : hello.status();
  if (!st.ok()) {
    std::fprintf(stderr, "tandem prefill: refusing decode engine %llu: %s\n", (unsigned long long)theirs,
                 st.message().c_str());
    (void)peer.connection->Send(mine.Encode());  // the decode side checks too, and reports
    ++stats_.peers_closed;
    DropPeerLocked(peer.connection->id());  // our Hello still goes out first
    return;
  }
  peer.hello_ok = true;
  peer.decode_instance = theirs;
  const uint64_t id = peer.connection->id();
  std::vector<uint64_t> stale;  // earlier connections of the same decode instance: dead to it
  for (auto& [other_id, other] : peers_) {
    if (other_id != id && other.decode_instance == theirs) stale.push_back(other_id);
  }
  for (uint64_t s : stale) DropPeerLocked(s);
  // Our answer promises the decode side that nothing of an earlier connection
  // of its own still writes into its pages (docs/handoff-states.md, the fence).
  auto conn = peers_.at(id).connection;
  if (MayAnswerLocked(theirs, id)) {
    (void)conn->Send(mine.Encode());
  } else {
    deferred_hellos_.push_back({conn, mine});
  }
}

void PrefillWorker::OnMessage(std::shared_ptr<transfer::Connection> connection, const std::vector<uint8_t>& bytes) {
  auto type = PeekType(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = peers_.find(connection->id());
  if (it == peers_.end() || !connection->alive()) return;  // dropped: its handoffs are already gone
  Peer& peer = it->second;
  peer.last_heard = Clock::now();
  if (!type.ok() && !peer.hello_ok) {
    // A first message we cannot read (another wire version, or not tandem): a
    // refused handshake, said plainly (our Hello names our version), not a silent drop.
    std::fprintf(stderr, "tandem prefill: refusing a decode engine whose first message is unreadable: %s\n",
                 type.status().ToString().c_str());
    (void)connection->Send(Hello{"prefill", layout_fingerprint(), weights_identity_, instance_id_, 0}.Encode());
    ++stats_.peers_closed;
    DropPeerLocked(connection->id());
  } else if (!type.ok()) {
    std::fprintf(stderr, "tandem prefill: dropping a malformed message: %s\n", type.status().ToString().c_str());
  } else if (*type == MessageType::kHello) {
    OnHello(peer, bytes);
  } else {
    HandleLocked(peer, connection, *type, bytes);
  }
}

void PrefillWorker::HandleLocked(Peer& peer, const std::shared_ptr<transfer::Connection>& connection, MessageType type,
                                 const std::vector<uint8_t>& bytes) {
  switch (type) {
    case MessageType::kHello:
    case MessageType::kHeartbeat:
      return;  // last_heard is all a heartbeat is for
    case MessageType::kDestination: {
      auto d = Destination::Decode(bytes);
      if (!d.ok()) {
        // Without a valid message there is no id to answer; the decode side's deadline ends it.
        std::fprintf(stderr, "tandem prefill: bad destination: %s\n", d.status().ToString().c_str());
        return;
      }
      if (!peer.hello_ok) return Refuse(*connection, d->handoff_id, "no accepted Hello on this connection");
      if (d->decode_instance_id != peer.decode_instance) {
        return Refuse(*connection, d->handoff_id, "destination names another decode instance than its Hello");
      }
      if (queue_.size() >= options_.max_queue) {
        return Refuse(*connection, d->handoff_id,
                      "the prefill queue is full (" + std::to_string(options_.max_queue) + " handoffs)");
      }
      const auto deadline = Clock::now() + std::chrono::milliseconds(d->time_budget_ms);
      queue_.push_back({std::move(d).value(), connection, peer.decode_instance, deadline});
      cv_.notify_all();
      return;
    }
    case MessageType::kAbort: {
      auto abort = Abort::Decode(bytes);
      if (!abort.ok()) return;
      const uint64_t id = abort->handoff_id;
      if (id == running_handoff_ && connection->id() == running_connection_) {
        sender_.RequestAbort(id);  // acknowledged when the sender has stopped and flushed
        return;
      }
      std::erase_if(queue_, [&](const Job& j) {
        return j.destination.handoff_id == id && j.connection->id() == connection->id();
      });
      ++stats_.aborted;
      // Queued, finished or unknown: nothing of ours is in flight for it.
      (void)connection->Send(AbortAck{id}.Encode());
      return;
    }
    case MessageType::kCommit:
    case MessageType::kAbortAck:
      return;  // decode engines send neither; ignored
  }
}

void PrefillWorker::OnClose(uint64_t connection_id) {
  std::lock_guard<std::mutex> lock(mu_);
  DropPeerLocked(connection_id);
}

void PrefillWorker::DropPeerLocked(uint64_t connection_id) {
  auto it = peers_.find(connection_id);
  if (it != peers_.end()) {
    // Closed here, under mu_, so nothing else goes out on it first (Close never
    // waits for our handlers: they run later, on the transport's threads).
    it->second.connection->Close();
    if (it->second.decode_instance != 0) closing_[it->second.decode_instance].push_back(it->second.connection);
    peers_.erase(it);
  }
  std::erase_if(queue_, [&](const Job& j) { return j.connection->id() == connection_id; });
  if (running_connection_ == connection_id) sender_.RequestAbort(running_handoff_);
}

// A Hello on a new connection promises that nothing of an earlier connection
// of that decode instance still writes: answered once no handoff of one runs
// and every one of them is released (its pending puts completed or cancelled).
bool PrefillWorker::MayAnswerLocked(uint64_t decode_instance, uint64_t connection_id) {
  if (running_connection_ != 0 && running_connection_ != connection_id && running_decode_instance_ == decode_instance) {
    return false;
  }
  auto it = closing_.find(decode_instance);
  if (it == closing_.end()) return true;
  std::erase_if(it->second, [](const auto& c) { return c->WaitReleased(Clock::now()); });
  if (!it->second.empty()) return false;
  closing_.erase(it);
  return true;
}

void PrefillWorker::AnswerDeferredHellosLocked() {
  std::erase_if(deferred_hellos_, [&](const auto& d) {
    if (!d.first->alive()) return true;
    if (!MayAnswerLocked(d.second.peer_instance_id, d.first->id())) return false;
    (void)d.first->Send(d.second.Encode());
    return true;
  });
}

void PrefillWorker::RunHeartbeats() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.heartbeat_interval, [&] { return stop_; });
    if (stop_) return;
    const auto now = Clock::now();
    std::vector<std::shared_ptr<transfer::Connection>> silent;
    for (auto& [id, peer] : peers_) {
      if (now - peer.last_heard > options_.peer_timeout || !peer.connection->alive()) {
        silent.push_back(peer.connection);
      } else {
        (void)peer.connection->Send(Heartbeat{instance_id_}.Encode());
      }
    }
    for (auto& c : silent) {
      std::fprintf(stderr, "tandem prefill: decode engine on connection %llu silent for more than %lld ms: closing\n",
                   (unsigned long long)c->id(), (long long)options_.peer_timeout.count());
      DropPeerLocked(c->id());  // closes it; its handoffs end
    }
    stats_.peers_closed += int64_t(silent.size());
    // Queued handoffs past their budget end now, not when the worker reaches them.
    std::erase_if(queue_, [&](const Job& j) {
      if (now < j.deadline) return false;
      Refuse(*j.connection, j.destination.handoff_id, "its time budget ran out while queued at the prefill engine");
      return true;
    });
    AnswerDeferredHellosLocked();
    for (auto it = closing_.begin(); it != closing_.end();) {  // forget what is released
      std::erase_if(it->second, [](const auto& c) { return c->WaitReleased(Clock::now()); });
      it = it->second.empty() ? closing_.erase(it) : std::next(it);
    }
  }
}

void PrefillWorker::FinishFailed(const Job& job, const Status& status) {
  const uint64_t id = job.destination.handoff_id;
  if (!sender_.last_run_fenced()) {
    // We cannot prove our writes landed: never acknowledge. Closing the
    // endpoint is what frees the decode side's pages.
    std::fprintf(stderr, "tandem prefill: handoff %llu ended (%s) without a confirmed flush: closing connection %llu\n",
                 (unsigned long long)id, status.ToString().c_str(), (unsigned long long)job.connection->id());
    ++stats_.peers_closed;
    DropPeerLocked(job.connection->id());  // closes it, under mu_: no late AbortAck goes out first
    job.connection->Close();               // (already dropped by a reconnect: close it all the same)
    return;
  }
  if (status.code() == StatusCode::kAborted) {
    ++stats_.aborted;
    (void)job.connection->Send(AbortAck{id}.Encode());
    return;
  }
  ++stats_.failed;
  std::fprintf(stderr, "tandem prefill: handoff %llu failed: %s\n", (unsigned long long)id, status.ToString().c_str());
  (void)job.connection->Send(Abort{id, status.message()}.Encode());
}

void PrefillWorker::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    if (Clock::now() >= job.deadline) {
      Refuse(*job.connection, job.destination.handoff_id, "its time budget ran out while queued at the prefill engine");
      continue;
    }
    running_connection_ = job.connection->id();
    running_handoff_ = job.destination.handoff_id;
    running_decode_instance_ = job.decode_instance;
    sender_.ClearAbort();
    lock.unlock();
    const transfer::RemoteKey key{job.destination.remote_key, UINT64_MAX};
    auto commit = sender_.Run(job.destination, key, *job.connection, job.deadline);
    lock.lock();
    if (commit.ok()) {
      ++stats_.committed;
    } else {
      FinishFailed(job, commit.status());
    }
    running_connection_ = running_handoff_ = running_decode_instance_ = 0;
    // Its writes flushed, or its connection closed: answer the Hellos that
    // waited for it (once that connection is released too).
    AnswerDeferredHellosLocked();
  }
}

void PrefillWorker::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
    if (running_handoff_) sender_.RequestAbort(running_handoff_);
  }
  cv_.notify_all();
  thread_.join();
  heartbeat_thread_.join();
}

}  // namespace tandem
