// The continuous-batching scheduler, the same for every role (colocated,
// prefill, decode). Each engine step is schedule -> run -> post-process:
// Admit() moves waiting requests into the running set while pages allow
// (reusing cached prefixes from every tier; in the decode role by beginning
// their remote prefill instead), and Schedule() builds one ragged batch of
// decode tokens plus prompt chunks under the token budget, taking pages for
// each (evicting cached prefixes, then preempting the most recently admitted
// other sequence, which is recomputed later: invariant 5 makes that
// invisible). The engine runs the batch and post-processes it (sampling,
// streaming, retiring), calling back into the scheduler's queues.
//
// Loop thread only.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "cache/page_pool.h"
#include "model/forward.h"
#include "prefix/prefix_index.h"
#include "prefix/tiers.h"
#include "runtime/engine_options.h"
#include "runtime/engine_metrics.h"
#include "runtime/sequence.h"

namespace tandem {

class Scheduler {
 public:
  // What the scheduler asks of the engine when it decides.
  struct Hooks {
    std::function<void(Sequence&, Status)> fail;                   // end a request with an error
    std::function<void(Sequence&, const std::string&)> finish;     // end a request ("length")
    std::function<void(Sequence&)> retire;                         // give its pages back (full ones to the prefix cache)
    // Decode role: begin bringing the prompt's cache here (ResourceExhausted:
    // no pages yet, retried until EngineOptions::page_wait). Empty: compute prompts here.
    std::function<Status(Sequence&)> begin_remote;
  };
  Scheduler(const EngineOptions& options, PagePool& pool, PrefixIndex* index, EngineMetrics& metrics,
            EngineStats& counters, Hooks hooks);
  void SetTiers(TieredCache* tiers) { tiers_ = tiers; }

  std::deque<std::unique_ptr<Sequence>>& waiting() { return waiting_; }
  std::vector<std::unique_ptr<Sequence>>& running() { return running_; }
  std::vector<std::unique_ptr<Sequence>>& prefetching() { return prefetching_; }  // waiting for an L3 -> L2 prefetch

  // Waiting requests -> running, while slots and pages allow.
  void Admit();
  // The next step's members and their chunks (batch[i] is members[i]'s);
  // empty when nothing can run.
  std::vector<Sequence*> Schedule(std::vector<SequenceChunk>* batch);

 private:
  bool EnsurePages(Sequence& seq, int64_t tokens);
  bool LookupTiers(Sequence& seq, PrefixIndex::Match& l1, int64_t max_tokens);
  bool ReclaimTierCopies();
  bool ReleaseWaitingPages(const Sequence* keep);
  bool Preempt(const Sequence* keep);

  const EngineOptions& options_;
  PagePool& pool_;
  PrefixIndex* const index_;
  TieredCache* tiers_ = nullptr;
  EngineMetrics& metrics_;
  EngineStats& counters_;
  const Hooks hooks_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  std::vector<std::unique_ptr<Sequence>> prefetching_;
  uint64_t next_handoff_ = 1;  // decode role: attempt ids
};

}  // namespace tandem
