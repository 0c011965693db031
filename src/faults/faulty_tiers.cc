#include "faults/faulty_tiers.h"

#include <cstring>
#include <thread>

namespace tandem::faults {

TierOptions::Factory TierFaults::Factory() const {
  const TierFaults faults = *this;
  return [faults](PagePool& l1, const CacheBufferRegistry& registry, const TierOptions& options,
                  std::string disk_subdir) -> StatusOr<std::unique_ptr<TieredCache>> {
    CacheBufferId ungated = -1;
    if (!faults.ungated_buffer.empty()) {
      auto b = registry.Find(faults.ungated_buffer);
      if (!b.ok()) {
        return InvalidArgument("the ungated-buffer fault names '" + faults.ungated_buffer +
                               "', which is not in this cache's registry (is attention sparse?)");
      }
      ungated = *b;
    }
    return std::unique_ptr<TieredCache>(
        new FaultyTieredCache(l1, registry, options, std::move(disk_subdir), faults.copy_delay, ungated));
  };
}


void FaultyTieredCache::Delay() const {
  if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
}

int64_t FaultyTieredCache::CopyLoad(std::span<const int32_t> src, std::span<const int32_t> dst, LayerGates& gates) {
  const CacheLayout& layout = l1().layout();
  int64_t bytes = 0;
  auto copy = [&](CacheBufferId b, int l) {
    for (size_t p = 0; p < src.size(); ++p) {
      std::memcpy(l1().Segment(b, l, dst[p]), host().Segment(b, l, src[p]), size_t(layout.page_stride(b)));
      bytes += layout.page_stride(b);
    }
  };
  for (int l = 0; l < layout.n_layers(); ++l) {
    Delay();
    for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
      if (b != ungated_) copy(b, l);
    }
    gates.Open(l);  // the fault, when ungated_ >= 0: before that buffer has landed
  }
  if (ungated_ >= 0) {
    for (int l = 0; l < layout.n_layers(); ++l) {
      Delay();
      copy(ungated_, l);
    }
  }
  return bytes;
}

}  // namespace tandem::faults
