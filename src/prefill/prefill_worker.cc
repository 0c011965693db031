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

PrefillWorker::~PrefillWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (running_handoff_) sender_.RequestAbort(running_handoff_);
  }
  cv_.notify_all();
  thread_.join();
  heartbeat_thread_.join();
}

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

void PrefillWorker::OnHello(Peer& peer, const std::vector<uint8_t>& bytes) {
  auto hello = Hello::Decode(bytes);
  const uint64_t theirs = hello.ok() ? hello->instance_id : 0;
  const Hello mine{"prefill", layout_fingerprint(), weights_identity_, instance_id_, theirs};
  Status st = hello.ok() ? transfer::CheckHello(mine, *hello) : hello.status();
  // Our Hello goes out either way: the decode side checks too, and reports.
  (void)peer.connection->Send(mine.Encode());
  if (st.ok()) {
    peer.hello_ok = true;
    peer.decode_instance = theirs;
    return;
  }
  std::fprintf(stderr, "tandem prefill: refusing decode engine %llu: %s\n", (unsigned long long)theirs,
               st.message().c_str());
  peer.hello_ok = false;
}

void PrefillWorker::OnMessage(std::shared_ptr<transfer::Connection> connection, const std::vector<uint8_t>& bytes) {
  auto type = PeekType(bytes);
  if (!connection->alive()) return;  // closed by us: its handoffs are already gone
  std::unique_lock<std::mutex> lock(mu_);
  Peer& peer = peers_[connection->id()];
  if (!peer.connection) peer.connection = connection;
  peer.last_heard = Clock::now();
  if (!type.ok()) {
    std::fprintf(stderr, "tandem prefill: dropping a malformed message: %s\n", type.status().ToString().c_str());
    return;
  }
  switch (*type) {
    case MessageType::kHello:
      OnHello(peer, bytes);
      if (!peer.hello_ok) {
        ++stats_.peers_closed;
        lock.unlock();
        connection->Close();  // flushes our Hello out first
      }
      return;
    case MessageType::kHeartbeat:
      return;  // last_heard is all it is for
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
      queue_.push_back({std::move(d).value(), std::move(connection), deadline});
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
  peers_.erase(connection_id);
  std::erase_if(queue_, [&](const Job& j) { return j.connection->id() == connection_id; });
  if (running_connection_ == connection_id) sender_.RequestAbort(running_handoff_);
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
    for (auto& c : silent) DropPeerLocked(c->id());
    // Queued handoffs past their budget end now, not when the worker reaches them.
    std::erase_if(queue_, [&](const Job& j) {
      if (now < j.deadline) return false;
      Refuse(*j.connection, j.destination.handoff_id, "its time budget ran out while queued at the prefill engine");
      return true;
    });
    stats_.peers_closed += int64_t(silent.size());
    lock.unlock();
    for (auto& c : silent) {
      std::fprintf(stderr, "tandem prefill: decode engine on connection %llu silent for more than %lld ms: closing\n",
                   (unsigned long long)c->id(), (long long)options_.peer_timeout.count());
      c->Close();  // its on_close ends its handoffs
    }
    lock.lock();
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
    job.connection->Close();
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
    sender_.ClearAbort();
    lock.unlock();
    const transfer::RemoteKey key{job.destination.remote_key, UINT64_MAX};
    auto commit = sender_.Run(job.destination, key, *job.connection, job.deadline);
    lock.lock();
    if (!commit.ok()) FinishFailed(job, commit.status());
    running_connection_ = running_handoff_ = 0;
    if (commit.ok()) ++stats_.committed;
  }
}

}  // namespace tandem
