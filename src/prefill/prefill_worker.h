// The prefill engine's handoff loop: Destinations arrive from decode engines,
// one worker thread computes each prompt and streams its cache into the
// destination (HandoffSender), then commits. An Abort stops the handoff in
// flight at its next layer, drops a queued one, and is always acknowledged
// (after the sender has flushed, so no write can land later).
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "transfer/handoff_sender.h"

namespace tandem {

class PrefillWorker {
 public:
  PrefillWorker(const Model& model, const CacheSpec& spec, int threads, int64_t pool_pages,
                transfer::SenderOptions options);
  ~PrefillWorker();

  // Transport thread: a message from the decode engine on `connection`.
  void OnMessage(std::shared_ptr<transfer::Connection> connection, const std::vector<uint8_t>& bytes);
  std::string layout_fingerprint() const;
  // Sets up the sender's cache tiers (SenderOptions::tiers). Before any handoff.
  Status EnableTiers(const std::string& weights_identity) { return sender_.EnableTiers(weights_identity); }

  struct Stats {
    int64_t committed = 0, failed = 0, aborted = 0;
    int64_t pages_in_use = 0;  // of this engine's own pool, beyond the prefix cache; 0 when idle
    int64_t cached_pages = 0;  // held by the prefix cache
    int64_t cached_tokens = 0;  // prompt tokens not computed because they were cached
  };
  Stats stats() const;

 private:
  struct Job {
    Destination destination;
    std::shared_ptr<transfer::Connection> connection;
  };
  void Run();

  const CacheSpec spec_;
  ThreadPool threads_;
  PagePool pool_;
  transfer::HandoffSender sender_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;   // guarded by mu_
  uint64_t running_ = 0;    // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  Stats stats_;             // guarded by mu_
  std::thread thread_;
};

}  // namespace tandem
