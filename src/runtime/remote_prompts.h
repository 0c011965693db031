// Where a decode-role engine's prompts are computed: another engine. The
// engine hands each admitted request to it instead of computing the prompt;
// the prompt's cache arrives in the engine's own page pool (whose memory
// PoolMemory() provides, registered so that peers can write into it), and
// the request continues from its first token, already sampled there.
//
// decode/remote_prefill.h implements it over the transfer layer; the engine
// knows nothing of links, wire messages or transports. Every method is
// called from the engine's loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/page_pool.h"
#include "common/sampling_params.h"
#include "common/status.h"

namespace tandem {

class PrefixIndex;
class TieredCache;

class RemotePrompts {
 public:
  struct Ready {
    std::vector<int32_t> pages;  // cover the whole prompt; the engine owns one reference each
    int32_t first_token = 0;
    int64_t cached_tokens = 0;   // prompt tokens found in this engine's own prefix cache
    uint64_t compute_us = 0, transfer_us = 0;  // as the computing side measured them
  };
  struct Outcome {
    uint64_t id = 0;
    Status status;           // not OK: the request's prompt could not be brought here
    bool retryable = false;  // the link's or the peer's failure, not the data's: place it again
    Ready ready;             // when OK
  };
  // Counters since start (and a few gauges), exported as the engine's metrics.
  struct Counters {
    int64_t committed = 0, failed = 0, aborted = 0, verified = 0, digest_mismatches = 0;
    int64_t quarantined_pages = 0, in_flight = 0;
    int64_t links_up = 0, reconnects = 0, links_declared_dead = 0, affinity_hits = 0;
    std::vector<int64_t> buffer_bytes;  // per cache buffer (registry order), of committed handoffs
  };

  virtual ~RemotePrompts() = default;
  // The page pool's memory (built with PoolMemory() before Attach).
  virtual uint8_t* PoolMemory() = 0;
  // Once, with the engine's pool and prefix index (may be null); may wait
  // (bounded) for the first links.
  virtual void Attach(PagePool& pool, PrefixIndex* index) = 0;
  // A host tier under the prefix index, or null.
  virtual void SetTiers(TieredCache* tiers) = 0;
  // Begins bringing `tokens`' cache here. ResourceExhausted: no pages yet
  // (retry); other errors end the request. `replaces`: an earlier attempt of
  // the same request that failed (another place is preferred), 0: none.
  virtual Status Start(uint64_t id, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                       uint64_t replaces) = 0;
  // Ends an attempt now; Poll reports nothing more for it.
  virtual void Abort(uint64_t id, const std::string& reason) = 0;
  // The attempts that ended since the last call.
  virtual std::vector<Outcome> Poll() = 0;
  virtual bool healthy() const = 0;
  virtual Counters counters() const = 0;
};

}  // namespace tandem
