// The engine: one loop thread that owns a model's forward pass, page pool and
// prefix index, and serves many requests at once with continuous batching.
//
// Each step: take new requests, drop cancelled and expired ones, admit
// waiting requests while pages allow (reusing cached prefixes), build one
// ragged batch of decode tokens plus prefill chunks under a token budget, run
// it, sample, stream text, retire finished requests (their full pages go to
// the prefix index). When a running sequence needs a page and none can be
// freed, the most recently admitted other sequence is preempted and later
// recomputed; determinism (invariant 5) makes that invisible in its output.
//
// Thread safety: Submit, Stats, Healthy, BeginShutdown are called from any
// thread; everything else belongs to the loop thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "model/cache_spec.h"
#include "model/forward.h"
#include "prefix/prefix_index.h"
#include "prefix/tiers.h"
#include "runtime/engine_metrics.h"
#include "runtime/prefill_sink.h"
#include "runtime/remote_prompts.h"
#include "runtime/request.h"

namespace tandem {

// The order in which a step gives prompt chunks their share of the token
// budget (decode tokens always go first). Outputs never depend on it.
enum class PrefillOrder {
  kArrival,         // admission order: bounds the tail (the last prompt of a burst waits for the burst, not more)
  kShortestFirst,   // the oldest prompt first (it always progresses), then shortest remaining: short appends
                    // do not wait behind long prompts (lower median time to first token, longer tail)
};
StatusOr<PrefillOrder> ParsePrefillOrder(const std::string& name);  // "arrival" | "shortest"

struct EngineOptions {
  AttentionOptions attention;
  int64_t cache_tokens = 65536;   // page pool size, in tokens
  int64_t context_tokens = 0;     // per sequence; 0 = the model's context length
  int32_t max_running = 32;       // sequences in the decode batch
  int32_t max_waiting = 256;      // queued requests before Submit refuses
  int32_t chunk_size = 8192;      // prefill tokens of one sequence per step
  int32_t max_batch_tokens = 8192;
  PrefillOrder prefill_order = PrefillOrder::kArrival;
  bool prefix_cache = true;
  std::chrono::milliseconds request_timeout{600'000};
  int threads = 2;
  // Decode role: a prompt whose remote prefill fails for the link's or the
  // peer's sake is placed again (new reservation, new attempt id) up to this
  // many times in all.
  int32_t max_placements = 3;
  // Decode role: how long a request may wait for pages to begin its remote prefill.
  std::chrono::milliseconds page_wait{30'000};
  // Host (L2) and disk (L3) tiers under the prefix cache; off when host_pages is 0.
  TierOptions tiers;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  PagePool::Accounting pages;
  int64_t cached_pages = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, prefix_hit_tokens = 0;
  int64_t preemptions = 0, requests_finished = 0, requests_cancelled = 0, requests_failed = 0;
  bool healthy = false;
};

class Engine {
 public:
  // The role, at most one of: a sink (prefill role: each request's prompt is
  // computed, batched with others, streamed to the sink layer by layer, and
  // ends with its first token; runtime/prefill_sink.h) or remote prompts
  // (decode role: each prompt is computed elsewhere and its cache lands in
  // this engine's pool; runtime/remote_prompts.h). Neither: colocated.
  struct Role {
    PrefillSink* prefill = nullptr;
    std::unique_ptr<RemotePrompts> decode;
  };
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& options, Role role);
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& options) {
    return Create(model, options, Role{});
  }
  ~Engine();  // stops the loop, cancelling whatever is left

  // Queues a request. Fails with ResourceExhausted when the waiting queue is
  // full, Unavailable when shutting down, InvalidArgument when it cannot fit.
  StatusOr<std::shared_ptr<RequestHandle>> Submit(RequestSpec spec);

  EngineStats Stats() const;
  bool Healthy() const { return !stopping_.load() && loop_alive_.load() && link_healthy_.load(); }
  const EngineOptions& options() const { return options_; }
  int64_t context_tokens() const { return context_tokens_; }
  const CacheSpec& cache_spec() const { return spec_; }
  EngineMetrics& metrics() { return metrics_; }
  // Tier counters and occupancy (zeros without tiers). Thread-safe.
  TierStats tier_stats() const { return tiers_ ? tiers_->stats() : TierStats{}; }
  Status CheckTierAccounting() const { return tiers_ ? tiers_->CheckAccounting() : Status::Ok(); }
  // Where buffer b of every layer lives in the page pool (fixed at start;
  // thread-safe): what a fault rule of the transport matches puts against.
  std::vector<std::pair<const uint8_t*, size_t>> BufferMemory(CacheBufferId b) const;
  // Blocks until the tiers' copy engine is idle (tests). Thread-safe.
  void DrainTierCopies() const {
    if (tiers_) tiers_->Drain();
  }

  // Stops admitting; requests already in flight finish, or are cancelled once
  // `drain` passes. Returns when the loop has exited.
  void Shutdown(std::chrono::milliseconds drain);

 private:
  struct Sequence;
  Engine(const Model& model, const EngineOptions& options, CacheSpec spec, Role role);
  void PollRemote();
  void Loop();
  void TakeNewRequests();
  void DropCancelledAndExpired();
  void Admit();
  bool EnsurePages(Sequence& seq, int64_t tokens);
  bool LookupTiers(Sequence& seq, PrefixIndex::Match& l1, int64_t max_tokens);
  bool ReclaimTierCopies();
  bool ReleaseWaitingPages(const Sequence* keep);
  bool Preempt(const Sequence* keep);
  void Step();
  void Emit(Sequence& seq, int32_t token);
  void HandOff(Sequence& seq, int32_t first_token);  // prefill role
  void Finish(Sequence& seq, const std::string& reason);
  void Fail(Sequence& seq, Status error);
  void Retire(Sequence& seq);
  void PublishStats();

  const Model& model_;
  const EngineOptions options_;
  const CacheSpec spec_;
  const int64_t context_tokens_;
  ThreadPool threads_;
  std::unique_ptr<RemotePrompts> remote_;  // decode role only; owns the pool memory
  PrefillSink* const sink_;                      // prefill role only
  std::unique_ptr<PagePool> pool_;
  std::unique_ptr<PrefixIndex> index_;
  std::unique_ptr<TieredCache> tiers_;  // colocated only; after index_ (it holds L1 references)
  ForwardPass forward_;
  Sampler sampler_;
  EngineMetrics metrics_;

  // Loop thread only.
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<std::unique_ptr<Sequence>> prefetching_;  // waiting for an L3 -> L2 prefetch
  std::vector<float> logits_;
  EngineStats counters_;

  mutable Mutex mu_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Sequence>> incoming_ GUARDED_BY(mu_);
  EngineStats published_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::chrono::steady_clock::time_point drain_deadline_ GUARDED_BY(mu_);

  std::atomic<bool> stopping_{false};
  std::atomic<bool> link_healthy_{true};
  RemotePrompts::Counters seen_;  // loop thread: decode-role counters already exported
  double handoff_seconds_total_ = 0, request_seconds_total_ = 0;  // loop thread
  uint64_t next_handoff_ = 1;  // loop thread
  std::atomic<bool> loop_alive_{false};
  std::thread loop_;
};

}  // namespace tandem
