#include "faults/fault_options.h"

namespace tandem::faults {

void FaultOptions::ApplyTo(EngineOptions* engine) const {
  if (poison_pages) engine->page_hook = PoisonPages();
  if (tiers.any()) engine->tiers.make = tiers.Factory();
}

FaultPlan FaultOptions::ConnectionPlan(std::vector<std::pair<const uint8_t*, size_t>> index_k) const {
  FaultPlan plan;
  plan.put_delay = put_delay;
  plan.bit_flip_rate = bit_flip_rate;
  plan.drop_messages_after = wedge_after_messages;
  if (unsafe_early_commit) plan.unflushed_sources = std::move(index_k);
  return plan;
}

}  // namespace tandem::faults
