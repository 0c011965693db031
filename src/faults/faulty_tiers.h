// TESTS ONLY: a tier copy engine with faults, chosen by TieredCache::Create
// when a debug option asks for one (TierOptions::debug_copy_delay,
// debug_ungated_buffer; the --debug-copy-delay-us and --debug-ungated-index-k
// flags). The production copy engine has no fault branches.
//
// - Slow copies: it sleeps debug_copy_delay per layer of a load and per L3
//   page read, so readers really wait on the layer gates.
// - The incident's fault: a load opens each layer's gate before one
//   registered buffer (index-K) has landed; that buffer is copied after every
//   gate is open. Readers that trust the gate read stale rows — what the
//   oracle must catch. (The late copy may also land after its request ended
//   and its pages were reused: this fault corrupts more than its target.)
#pragma once

#include "prefix/tiers.h"

namespace tandem {

class FaultyTieredCache : public TieredCache {
 public:
  FaultyTieredCache(PagePool& l1, const CacheBufferRegistry& registry, const TierOptions& options,
                    std::string disk_subdir, CacheBufferId ungated)
      : TieredCache(l1, registry, options, std::move(disk_subdir)), ungated_(ungated) {}
  // Queued copies call the overrides below: they finish while this object is whole.
  ~FaultyTieredCache() override { Drain(); }

 protected:
  int64_t CopyLoad(std::span<const int32_t> src, std::span<const int32_t> dst, LayerGates& gates) override;
  void BeforeDiskRead() override { Delay(); }

 private:
  void Delay() const;
  const CacheBufferId ungated_;  // -1: none
};

}  // namespace tandem
