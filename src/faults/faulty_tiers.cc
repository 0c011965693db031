#include "prefix/faulty_tiers.h"

#include <cstring>
#include <thread>

namespace tandem {

void FaultyTieredCache::Delay() const {
  if (options().debug_copy_delay.count() > 0) std::this_thread::sleep_for(options().debug_copy_delay);
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

}  // namespace tandem
