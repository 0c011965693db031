#include "faults/page_poison.h"

#include <cstring>

namespace tandem::faults {

void PoisonPage(PagePool& pool, int32_t page) {
  const CacheLayout& layout = pool.layout();
  for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
    for (int l = 0; l < layout.n_layers(); ++l) {
      std::memset(pool.Segment(b, l, page), kPoisonByte, size_t(layout.page_stride(b)));
    }
  }
}

}  // namespace tandem::faults
