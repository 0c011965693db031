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
#include "runtime/sampler.h"
#include "transfer/handoff_state.h"
#include "transfer/messages.h"
#include "transfer/transport.h"

namespace tandem::transfer {

struct SenderOptions {
  int32_t chunk_size = 512;
  HandoffDeadlines deadlines;
  bool unsafe_early_commit = false;
};

class HandoffSender {
 public:
  // `local` is this engine's own pool, where the prompt is computed.
  HandoffSender(const Model& model, const CacheSpec& spec, ThreadPool& threads, PagePool& local,
                SenderOptions options);

  // Runs one handoff to completion: compute, write, flush, send the Commit
  // (over `connection`) and return it. Or an error:
  // Aborted when RequestAbort(d.handoff_id) was called (writes stopped and
  // flushed: the caller may send AbortAck), DeadlineExceeded, or a transport error.
  // The first token is sampled with d.sampling.
  StatusOr<Commit> Run(const Destination& d, const RemoteKey& remote, Connection& connection);

  // Thread-safe: stops the handoff in flight at its next layer boundary.
  void RequestAbort(uint64_t handoff_id) { abort_id_.store(handoff_id); }

 private:
  Status PutLayer(int layer, int64_t first_token, int64_t end_token, const Destination& d,
                  const RemoteKey& remote, Connection& c, bool defer_index_k);

  const Model& model_;
  const CacheSpec& spec_;
  PagePool& local_;
  ForwardPass forward_;
  Sampler sampler_;
  const SenderOptions options_;
  std::atomic<uint64_t> abort_id_{0};
  std::vector<int32_t> local_pages_;
  std::unique_ptr<CacheLayout> remote_layout_;  // the decode pool's, for the handoff in flight
  std::vector<std::pair<int, int32_t>> deferred_;  // unsafe mode: (layer, prompt page) of index-K
};

}  // namespace tandem::transfer
