#include "prefill/prefill_worker.h"

#include <cstdio>

#include "transfer/handshake.h"

namespace tandem {

PrefillWorker::PrefillWorker(const Model& model, const CacheSpec& spec, int threads, int64_t pool_pages,
                             transfer::SenderOptions options)
    : spec_(spec),
      threads_(threads),
      pool_(spec_.registry, int(model.config().n_layers), pool_pages),
      sender_(model, spec_, threads_, pool_, options) {
  thread_ = std::thread([this] { Run(); });
}

PrefillWorker::~PrefillWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    if (running_) sender_.RequestAbort(running_);
  }
  cv_.notify_all();
  thread_.join();
}

std::string PrefillWorker::layout_fingerprint() const { return pool_.layout().Fingerprint(); }

PrefillWorker::Stats PrefillWorker::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  // The pool is touched only by the worker thread while a handoff runs; the
  // count is exact whenever no handoff is running.
  s.cached_pages = sender_.cached_pages();
  s.pages_in_use = pool_.used_pages() - s.cached_pages;
  s.cached_tokens = sender_.cached_tokens();
  return s;
}

void PrefillWorker::OnMessage(std::shared_ptr<transfer::Connection> connection, const std::vector<uint8_t>& bytes) {
  auto type = PeekType(bytes);
  if (!type.ok()) {
    std::fprintf(stderr, "tandem prefill: dropping a malformed message: %s\n", type.status().ToString().c_str());
    return;
  }
  if (*type == MessageType::kHello) {
    auto hello = Hello::Decode(bytes);
    const Hello mine{"prefill", layout_fingerprint(), 0};
    Status st = hello.ok() ? transfer::CheckHello(mine, *hello) : hello.status();
    (void)connection->Send(mine.Encode());  // the decode side checks too, and reports
    if (!st.ok()) std::fprintf(stderr, "tandem prefill: refusing a decode engine: %s\n", st.message().c_str());
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (*type == MessageType::kDestination) {
    auto d = Destination::Decode(bytes);
    if (!d.ok()) {
      std::fprintf(stderr, "tandem prefill: bad destination: %s\n", d.status().ToString().c_str());
      return;
    }
    queue_.push_back({std::move(d).value(), std::move(connection)});
    cv_.notify_all();
  } else if (*type == MessageType::kAbort) {
    auto abort = Abort::Decode(bytes);
    if (!abort.ok()) return;
    const uint64_t id = abort->handoff_id;
    if (id == running_) {
      sender_.RequestAbort(id);  // acknowledged when the sender has stopped and flushed
      return;
    }
    std::erase_if(queue_, [&](const Job& j) { return j.destination.handoff_id == id; });
    ++stats_.aborted;
    (void)connection->Send(AbortAck{id}.Encode());
  }
}

void PrefillWorker::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Job job = std::move(queue_.front());
    queue_.pop_front();
    running_ = job.destination.handoff_id;
    lock.unlock();
    const transfer::RemoteKey key{job.destination.remote_key, UINT64_MAX};
    auto commit = sender_.Run(job.destination, key, *job.connection);
    lock.lock();
    running_ = 0;
    if (commit.ok()) {
      ++stats_.committed;
    } else if (commit.status().code() == StatusCode::kAborted) {
      ++stats_.aborted;
      (void)job.connection->Send(AbortAck{job.destination.handoff_id}.Encode());
    } else {
      ++stats_.failed;
      std::fprintf(stderr, "tandem prefill: handoff %llu failed: %s\n",
                   (unsigned long long)job.destination.handoff_id, commit.status().ToString().c_str());
      (void)job.connection->Send(Abort{job.destination.handoff_id, commit.status().message()}.Encode());
    }
  }
}

}  // namespace tandem
