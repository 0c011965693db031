// TESTS ONLY: the fault library. Everything that makes tandem fail on purpose
// — a faulty handoff transport, a faulty tier copy engine, page poisoning —
// lives in src/faults/, is linked only by bin/ and the tests, and reaches the
// production classes only through their ordinary seams (a connection wrapper,
// TierOptions::make, PagePool's page hook). Production option structs carry
// no fault fields; FaultOptions is the one place they are chosen.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "faults/faulty_connection.h"
#include "faults/faulty_tiers.h"
#include "faults/page_poison.h"
#include "runtime/engine_options.h"

namespace tandem::faults {

struct FaultOptions {
  // The handoff's transport, on the prefill engine's side: each accepted
  // connection is wrapped (faults/faulty_connection.h).
  std::chrono::microseconds put_delay{0};  // every page write lands this much later
  double bit_flip_rate = 0;                // this share of page writes has one bit flipped
  int64_t wedge_after_messages = -1;       // after this many messages on a connection (from its Hello), none (-1: never)
  bool unsafe_early_commit = false;        // index-K writes are not covered by the flush before each Commit
  // The cache tiers' copy engine (faults/faulty_tiers.h).
  TierFaults tiers;
  // Every freed or reserved cache page, L1 and L2, is scribbled (faults/page_poison.h).
  bool poison_pages = false;

  bool transport_any() const {
    return put_delay.count() > 0 || bit_flip_rate > 0 || wedge_after_messages >= 0 || unsafe_early_commit;
  }
  bool any() const { return transport_any() || tiers.any() || poison_pages; }
  // Installs the cache faults into an engine's options: the page hook and the
  // tiers' factory.
  void ApplyTo(EngineOptions* engine) const;
  // The transport faults as a plan for each accepted connection; `index_k`:
  // where the engine's index-K buffer lives (EngineOptions::BufferMemory),
  // whose writes an unsafe early commit leaves unflushed.
  FaultPlan ConnectionPlan(std::vector<std::pair<const uint8_t*, size_t>> index_k) const;
};

}  // namespace tandem::faults
