// TESTS ONLY (the fault library, linked by bin/ and tests): a tier copy
// engine with faults, built by the factory TierFaults::Factory() returns
// (TierOptions::make; the --debug-copy-delay-us and --debug-ungated-index-k
// flags). The production copy engine has no fault branches, and the
// production libraries do not contain this one.
//
// - Slow copies: it sleeps copy_delay per layer of a load and per L3 page
//   read, so readers really wait on the layer gates.
// - The incident's fault: a load opens each layer's gate before one
//   registered buffer (index-K) has landed; that buffer is copied after every
//   gate is open. Readers that trust the gate read stale rows — what the
//   oracle must catch. (The late copy may also land after its request ended
//   and its pages were reused: this fault corrupts more than its target.)
#pragma once

#include <chrono>
#include <string>

#include "prefix/tiers.h"

namespace tandem::faults {

struct TierFaults {
  std::chrono::microseconds copy_delay{0};  // the copy engine sleeps this long per layer and per L3 page
  // The incident's fault: loads open each layer's gate before this registered
  // buffer (by its registry name) has landed; it is copied last.
  std::string ungated_buffer;

  bool any() const { return copy_delay.count() > 0 || !ungated_buffer.empty(); }
  // For TierOptions::make: builds the faulty copy engine (an unknown
  // ungated buffer is an error that names it).
  TierOptions::Factory Factory() const;
};

class FaultyTieredCache : public TieredCache {
 public:
  FaultyTieredCache(PagePool& l1, const CacheBufferRegistry& registry, const TierOptions& options,
                    std::string disk_subdir, std::chrono::microseconds delay, CacheBufferId ungated)
      : TieredCache(l1, registry, options, std::move(disk_subdir)), delay_(delay), ungated_(ungated) {}
  // Queued copies call the overrides below: they finish while this object is whole.
  ~FaultyTieredCache() override { Drain(); }

 protected:
  int64_t CopyLoad(std::span<const int32_t> src, std::span<const int32_t> dst, LayerGates& gates) override;
  void BeforeDiskRead() override { Delay(); }

 private:
  void Delay() const;
  const std::chrono::microseconds delay_;
  const CacheBufferId ungated_;  // -1: none
};

}  // namespace tandem::faults
