// The prefill side of the handoff: computes a prompt and streams every
// registered buffer of each layer straight into the decode engine's pages as
// the layer finishes, then flushes and only then builds the Commit with the
// first token and per-buffer digests (invariant 2).
//
// unsafe_early_commit reproduces the production bug on purpose, for tests
// that prove the oracle and the digests catch it: the index-K writes are
// posted last and the Commit is returned before they are flushed. Never use
// it in production; the server prints a warning when it is set.
#pragma once

#include <atomic>

#include "model/forward.h"
#include "prefix/prefix_index.h"
#include "prefix/tiers.h"
#include "runtime/sampler.h"
#include "transfer/handoff_state.h"
#include "transfer/messages.h"
#include "transfer/transport.h"

namespace tandem::transfer {

struct SenderOptions {
  int32_t chunk_size = 512;
  HandoffDeadlines deadlines;
  bool unsafe_early_commit = false;
  // The prefill engine's own prefix cache: a prompt whose start it computed
  // before (the previous round of a conversation) is only computed from where
  // the cache ends; cached pages the decode side lacks are sent as they are.
  bool prefix_cache = true;
  TierOptions tiers;  // L2/L3 under that cache; off when tiers.host_pages and host_bytes are 0
};

class HandoffSender {
 public:
  // `local` is this engine's own pool, where the prompt is computed.
  // Fails only through Create when tiers are asked for and cannot be set up.
  HandoffSender(const Model& model, const CacheSpec& spec, ThreadPool& threads, PagePool& local,
                SenderOptions options);
  // Sets up the tiers of options.tiers (call once, before Run).
  Status EnableTiers(const std::string& weights_identity);

  // Runs one handoff to completion: compute, write, flush, send the Commit
  // (over `connection`) and return it. Or an error: Aborted when
  // RequestAbort was called for it, DeadlineExceeded past `deadline` (or the
  // state deadline, whichever is first), or a transport error. The first
  // token is sampled with d.sampling.
  // After an error, last_run_fenced() says whether the flush that followed
  // the writes succeeded: only then may the caller acknowledge an abort or
  // report the failure; otherwise it must close the connection (the fence).
  StatusOr<Commit> Run(const Destination& d, const RemoteKey& remote, Connection& connection,
                       Clock::time_point deadline = Clock::time_point::max());
  bool last_run_fenced() const { return fenced_; }

  // Thread-safe: stops the handoff in flight at its next layer boundary.
  // The caller names it by its id and clears the request (ClearAbort) before
  // starting the next one, so an abort never outlives its handoff.
  void RequestAbort(uint64_t handoff_id) { abort_id_.store(handoff_id); }
  void ClearAbort() { abort_id_.store(0); }

  // Pages the prefix cache holds (the worker thread's view; exact when idle).
  int64_t cached_pages() const { return index_ ? index_->cached_pages() : 0; }
  // Prompt tokens not computed because they were cached, since start.
  int64_t cached_tokens() const { return cached_tokens_; }
  TierStats tier_stats() const { return tiers_ ? tiers_->stats() : TierStats{}; }

  ~HandoffSender();

 private:
  Status PutLayer(int layer, int64_t first_token, int64_t end_token, const Destination& d,
                  const RemoteKey& remote, Connection& c, bool defer_index_k);
  // Pages for the prompt: cached ones first (references taken), then L2
  // loads (gates set), then fresh ones. Returns how many tokens are cached.
  StatusOr<int64_t> TakePages(const Destination& d, int64_t n_pages);
  // Frees up to n pages of the local pool (prefix cache, finished L2 copies); false when it cannot.
  bool MakeRoom(int64_t n);

  const Model& model_;
  const CacheSpec& spec_;
  PagePool& local_;
  ForwardPass forward_;
  Sampler sampler_;
  const SenderOptions options_;
  std::atomic<uint64_t> abort_id_{0};
  bool fenced_ = true;  // the last Run's writes are known to have landed
  std::vector<int32_t> local_pages_;
  std::unique_ptr<CacheLayout> remote_layout_;  // the decode pool's, for the handoff in flight
  std::vector<std::pair<int, int32_t>> deferred_;  // unsafe mode: (layer, prompt page) of index-K
  std::unique_ptr<PrefixIndex> index_;
  std::unique_ptr<TieredCache> tiers_;
  std::shared_ptr<LayerGates> gates_;  // the L2 load of the handoff in flight
  int64_t cached_tokens_ = 0;
};

}  // namespace tandem::transfer
