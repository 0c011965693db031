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
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "model/cache_spec.h"
#include "model/forward.h"
#include "prefix/prefix_index.h"
#include "prefix/tiers.h"
#include "runtime/engine_metrics.h"
#include "runtime/engine_options.h"
#include "runtime/grammar_budget.h"
#include "runtime/prefill_sink.h"
#include "runtime/remote_prompts.h"
#include "runtime/request.h"
#include "runtime/scheduler.h"

namespace tandem {

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
  // Decode role: prompts are computed by remote prefill engines.
  bool remote_prefill() const { return remote_ != nullptr; }
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
  Engine(const Model& model, const EngineOptions& options, CacheSpec spec, Role role);
  void PollRemote();
  void Loop();
  void TakeNewRequests();
  void DropCancelledAndExpired();
  void Step();
  // A sequence whose next token is drawn this step, from these logits.
  struct Draw {
    Sequence* seq;
    std::span<const float> row;
  };
  void RunBatch(const std::vector<Sequence*>& members, const std::vector<SequenceChunk>& batch,
                std::vector<Draw>* draws);
  // Masks under the grammar budget, stopping at grammar_until, then every draw.
  void DrawTokens(std::vector<Draw>& draws, std::chrono::steady_clock::time_point grammar_until);
  void Emit(Sequence& seq, int32_t token, const PositionLogprobs* logprobs = nullptr);
  Status StartConstraint(Sequence& seq);
  void IndexPrompt(Sequence& seq);
  void CollectPromptLogprobs(Sequence& s, int64_t start, size_t n,
                             const std::function<std::span<const float>(size_t)>& row_at);
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
  std::unique_ptr<TieredCache> tiers_;  // after index_ (it holds L1 references)
  ForwardPass forward_;
  Sampler sampler_;
  ConstraintCache constraints_;
  GrammarBudget grammar_budget_;  // loop thread
  EngineMetrics metrics_;

  // Loop thread only.
  EngineStats counters_;
  Scheduler scheduler_;  // after counters_, metrics_, pool_ and index_ (it holds references)
  std::vector<float> logits_;

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
  std::atomic<bool> loop_alive_{false};
  std::thread loop_;
};

}  // namespace tandem
