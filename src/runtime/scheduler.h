// The continuous-batching scheduler, the same for every role (colocated,
// prefill, decode). Each engine step is schedule -> run -> post-process:
// Admit() moves waiting requests into the running set while pages allow
// (reusing cached prefixes from every tier), or hands them to the engine's
// role (runtime/engine_role.h: the decode role brings their prompts' cache
// from a prefill engine; they are held until it lands), and Schedule() builds one ragged batch of
// decode tokens plus prompt chunks under the token budget, taking pages for
// each (evicting cached prefixes, then preempting the most recently admitted
// other sequence, which is recomputed later: invariant 5 makes that
// invisible). The engine runs the batch and post-processes it (sampling,
// streaming, retiring). The queues are the scheduler's own: the engine
// changes them only through the named operations below.
//
// Loop thread only.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "cache/page_pool.h"
#include "model/forward.h"
#include "prefix/prefix_index.h"
#include "prefix/tiers.h"
#include "runtime/engine_options.h"
#include "runtime/engine_metrics.h"
#include "runtime/engine_role.h"
#include "runtime/sequence.h"
#include "runtime/step_budget.h"

namespace tandem {

class Scheduler {
 public:
  // What the scheduler asks of the engine when it decides.
  struct Hooks {
    std::function<void(Sequence&, Status)> fail;              // end a request with an error
    std::function<void(Sequence&, FinishReason)> finish;      // end a request (kLength)
    std::function<void(Sequence&)> retire;                    // give its pages back (full ones to the prefix cache)
    // Speculation: append up to `max_tokens` drafted tokens to a decoding
    // sequence, one of `decoding` in this step (Sequence::drafted says how
    // many); none: no drafts.
    std::function<void(Sequence&, int64_t max_tokens, int64_t decoding)> draft;
  };
  // `role` decides each admission (runtime/engine_role.h).
  Scheduler(const EngineOptions& options, PagePool& pool, PrefixIndex* index, EngineMetrics& metrics,
            EngineStats& counters, EngineRole& role, Hooks hooks);
  void SetTiers(TieredCache* tiers) { tiers_ = tiers; }

  // A new request, at the back of the waiting queue.
  void Enqueue(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }
  // Every sequence the scheduler holds: running, held by the role, waiting,
  // prefetching. `fn` may end them; EraseEnded drops those.
  void ForEach(const std::function<void(Sequence&)>& fn);
  void EraseEnded();
  bool empty() const { return running_.empty() && held_.empty() && waiting_.empty() && prefetching_.empty(); }
  // Sequences that compute in the next step (their own prompt or tokens).
  bool computing() const { return !running_.empty(); }
  bool holding() const { return !held_.empty(); }          // prompts the role is bringing
  bool prefetching() const { return !prefetching_.empty(); }
  int64_t running_count() const { return int64_t(running_.size() + held_.size()); }
  int64_t waiting_count() const { return int64_t(waiting_.size()); }
  // The running sequences, in admission order (the loop's post-processing).
  void ForEachRunning(const std::function<void(Sequence&)>& fn);

  // Prefetched (or out of time) sequences: back to the head of the queue.
  void TakePrefetched();
  // Waiting requests -> running (or held by the role), while slots and pages allow.
  void Admit();
  // A held sequence runs on (RoleHost::Resume).
  void Resume(Sequence& seq);
  // Held sequences -> the head of the waiting queue, in their admission order.
  void Requeue(std::span<Sequence* const> seqs);
  // The next step's members and their chunks (batch[i] is members[i]'s);
  // empty when nothing can run.
  // Beside decoding sequences, prompt chunks take at most the step budget's
  // tokens (runtime/step_budget.h).
  std::vector<Sequence*> Schedule(std::vector<SequenceChunk>* batch);
  // The last scheduled step took `seconds` to compute.
  void ObserveStep(double seconds) { step_budget_.Observe(last_prompt_tokens_, last_decode_tokens_, seconds); }
  const StepBudget& step_budget() const { return step_budget_; }
  // The prompt tokens the last step could take beside its decoding ones (-1: unbounded).
  int64_t last_prompt_budget() const { return last_prompt_budget_; }

 private:
  bool EnsurePages(Sequence& seq, int64_t tokens);
  void FitDrafts(Sequence& seq);
  bool LookupTiers(Sequence& seq, PrefixIndex::Match& l1, int64_t max_tokens);
  void ReleasePartial(PrefixIndex::Match& hit);
  int64_t CopyPartial(Sequence& seq, PrefixIndex::Match& hit);
  bool ReclaimTierCopies();
  bool ReleaseWaitingPages(const Sequence* keep);
  bool Preempt(const Sequence* keep);
  void CountPrompt(const Sequence& seq);
  uint64_t next_admission_ = 1;
  StepBudget step_budget_;
  int64_t last_prompt_tokens_ = 0, last_decode_tokens_ = 0, last_prompt_budget_ = -1;

  const EngineOptions& options_;
  PagePool& pool_;
  PrefixIndex* const index_;
  TieredCache* tiers_ = nullptr;
  EngineMetrics& metrics_;
  EngineStats& counters_;
  EngineRole& role_;
  const Hooks hooks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;      // admission order (Sequence::admission_order)
  std::vector<std::unique_ptr<Sequence>> held_;         // the role brings their prompts' cache; admission order
  std::vector<std::unique_ptr<Sequence>> prefetching_;  // waiting for an L3 -> L2 prefetch
};

}  // namespace tandem
