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
// A role (runtime/engine_role.h) plugs into the loop's seams: the prefill
// role streams each layer to a decode engine and ends requests at their first
// token; the decode role has prompts computed elsewhere. The engine itself
// has no role branches.
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
#include "model/numerics.h"
#include "prefix/prefix_index.h"
#include "prefix/tiers.h"
#include "runtime/engine_metrics.h"
#include "runtime/engine_options.h"
#include "structured/grammar_budget.h"
#include "runtime/engine_role.h"
#include "runtime/request.h"
#include "runtime/scheduler.h"

namespace tandem {

class Engine final : private RoleHost {
 public:
  // A colocated engine: it computes every request's prompt and tokens.
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& options);
  // An engine in `role` (runtime/engine_role.h), which it owns (the decode
  // role) or borrows (the prefill role owns its engine; it must outlive it).
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& options,
                                                  std::unique_ptr<EngineRole> role);
  static StatusOr<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& options, EngineRole& role);
  ~Engine();  // stops the loop, cancelling whatever is left

  // Queues a request. Fails with ResourceExhausted when the waiting queue is
  // full, Unavailable when shutting down, InvalidArgument when it cannot fit.
  StatusOr<std::shared_ptr<RequestHandle>> Submit(RequestSpec spec);

  EngineStats Stats() const;
  bool Healthy() const {
    return !stopping_.load() && loop_alive_.load() && role_healthy_.load() && LoopStall().count() == 0;
  }
  // How long the loop has been in its current pass, once that is past the
  // watchdog's limit (EngineOptions::loop_watchdog); 0 otherwise. Thread-safe.
  std::chrono::milliseconds LoopStall() const;
  // Why the loop is unhealthy by the watchdog, "" when it is not. Thread-safe.
  std::string StallNote() const;
  // Shutdown began: nothing new is admitted (thread-safe).
  bool draining() const { return stopping_.load(); }
  // Why the engine serves degraded (its role's HealthNote), "" when it does not. Thread-safe.
  std::string HealthNote() const { return role_->HealthNote(); }
  const EngineOptions& options() const { return options_; }
  int64_t context_tokens() const { return context_tokens_; }
  const CacheSpec& cache_spec() const override { return spec_; }
  // What decides this engine's tokens' bits (invariant 9; model/numerics.h). Thread-safe.
  const NumericsIdentity& numerics() const { return numerics_; }
  // Whether the engine serves `spec` (its role's limits included). Thread-safe.
  Status CheckRole(const RequestSpec& spec) const { return role_->Validate(spec); }
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

  // Stops admitting; requests already in flight finish, or fail (Unavailable:
  // a router moves them) once `drain` passes. Returns when the loop has exited.
  void Shutdown(std::chrono::milliseconds drain);

 private:
  Engine(const Model& model, const EngineOptions& options, CacheSpec spec, std::unique_ptr<EngineRole> owned,
         EngineRole* role);
  static StatusOr<std::unique_ptr<Engine>> Start(std::unique_ptr<Engine> engine);
  void Loop();
  void TakeNewRequests();
  // Resumed requests' delivered tokens, at most replay_tokens_per_pass of
  // them in all; a request whose replay is done goes to the scheduler.
  void ReplaySome();
  void EndReplay(Sequence& seq);  // its replay event; an answer the tokens end ends here
  // Every request the engine holds: replaying, and the scheduler's.
  void ForEachHeld(const std::function<void(Sequence&)>& fn);
  void DropCancelledAndExpired();
  void Step();
  // A sequence whose next token is drawn this step, from these logits.
  struct Draw {
    Sequence* seq;
    std::span<const float> row;
    std::span<const float> drafted_rows = {};  // a drafted sequence's: the rows after `row`, one per draft
  };
  // Speculation: a decoding sequence's drafts for this step (Scheduler::Hooks::draft),
  // and their walk (each kept exactly when the draw at its position equals it).
  void Draft(Sequence& seq, int64_t max_tokens, int64_t decoding);
  void DrawDrafted(Sequence& seq, const Draw& draw);
  void RunBatch(const std::vector<Sequence*>& members, const std::vector<SequenceChunk>& batch,
                std::vector<Draw>* draws);
  // Masks under the grammar budget, stopping at grammar_until, then every draw.
  void DrawTokens(std::vector<Draw>& draws, std::chrono::steady_clock::time_point grammar_until);
  void Emit(Sequence& seq, int32_t token, const PositionLogprobs* logprobs = nullptr);
  Status StartConstraint(Sequence& seq);
  void IndexPrompt(Sequence& seq);
  void CollectPromptLogprobs(Sequence& s, int64_t start, size_t n,
                             const std::function<std::span<const float>(size_t)>& row_at);
  void Finish(Sequence& seq, FinishReason reason);
  void Fail(Sequence& seq, Status error) override;
  void Retire(Sequence& seq);
  void PublishStats();

  // RoleHost: what the role is lent.
  PagePool& pool() override { return *pool_; }
  PrefixIndex* index() override { return index_.get(); }
  TieredCache* tiers() override { return tiers_.get(); }
  prometheus::Registry& metrics_registry() override { return *metrics_.registry(); }
  void Resume(Sequence& seq, std::vector<int32_t> pages, int32_t first_token, int64_t cached_tokens) override;
  void Requeue(std::span<Sequence* const> seqs) override { scheduler_.Requeue(seqs); }

  const Model& model_;
  const EngineOptions options_;
  const CacheSpec spec_;
  const int64_t context_tokens_;
  NumericsIdentity numerics_;  // set by the constructor
  ThreadPool threads_;
  // May own the pool's memory and pages of it: ~Engine resets it explicitly,
  // after the prefix index and before the pool (the pool's destructor does
  // not touch its memory).
  std::unique_ptr<EngineRole> owned_role_;
  EngineRole* const role_;                  // owned_role_, or a role that owns this engine
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
  // Resumed requests whose delivered tokens are still being replayed
  // (ReplaySome), in arrival order: the scheduler sees them after.
  std::deque<std::unique_ptr<Sequence>> replaying_;
  std::vector<float> logits_;

  mutable Mutex mu_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Sequence>> incoming_ GUARDED_BY(mu_);
  EngineStats published_ GUARDED_BY(mu_);
  uint64_t next_id_ GUARDED_BY(mu_) = 1;
  std::chrono::steady_clock::time_point drain_deadline_ GUARDED_BY(mu_);

  std::atomic<bool> stopping_{false};
  std::atomic<bool> role_healthy_{true};
  std::atomic<bool> loop_alive_{false};
  // When the loop last began a pass (steady clock, ns): the watchdog's beat.
  std::atomic<int64_t> loop_beat_ns_{0};
  std::thread loop_;
};

}  // namespace tandem
