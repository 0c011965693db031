// The prefill side's bytes of one handoff: the counterpart of the decode
// side's HandoffReceiver. Writes each computed layer's pages straight into
// the destination the decode engine named, and flushes before the Commit
// (invariant 2) or before the pages it reads are freed.
//
// Owned by the prefill engine's loop thread (not thread-safe): the engine's
// handoff table holds one per handoff, and only the loop thread calls it.
#pragma once

#include <chrono>
#include <memory>
#include <span>

#include "cache/page_pool.h"
#include "common/env.h"
#include "common/status.h"
#include "transfer/messages.h"
#include "transfer/transport.h"

namespace tandem {

class HandoffSender {
 public:
  // `destination` outlives the sender; the decode pool's layout is derived
  // from the registry and the pool size the destination names.
  HandoffSender(std::shared_ptr<transfer::Connection> connection, const Destination& destination,
                const CacheBufferRegistry& registry, int n_layers);

  // Writes layer `layer` of every registered buffer for the prompt pages that
  // hold tokens [first_token, end_token) and lie past the decode side's cached
  // prefix. Whole page segments are sent; rows past the prompt are don't-care.
  Status PutLayer(int layer, int64_t first_token, int64_t end_token, std::span<const int32_t> pages, PagePool& pool);
  // Waits (bounded) until the posted writes have landed: by the handoff's
  // `deadline` and two peer timeouts, at least a second (an Abort or AbortAck
  // must never overtake our writes). A flush that does not confirm is final:
  // `fenced()` turns false and the connection is to be closed (the fence).
  Status Flush(const Env& env, transfer::Clock::time_point deadline, std::chrono::milliseconds peer_timeout);

  bool posted() const { return posted_; }  // writes posted since the last flush
  bool fenced() const { return fenced_; }  // every write posted is known to have landed
  const std::shared_ptr<transfer::Connection>& connection() const { return connection_; }

 private:
  std::shared_ptr<transfer::Connection> connection_;
  const Destination& destination_;
  CacheLayout remote_layout_;  // the decode pool's (its offsets depend on its size)
  bool posted_ = false;
  bool fenced_ = true;
};

}  // namespace tandem
