#include "decode/write_windows.h"

#include <algorithm>

namespace tandem::transfer {

WriteWindows::WriteWindows(const CacheLayout& layout) {
  for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
    for (int l = 0; l < layout.n_layers(); ++l) {
      const uint64_t stride = uint64_t(layout.page_stride(b));
      segments_.push_back({uint64_t(layout.SegmentBase(b, l)), stride * uint64_t(layout.n_pages()), stride});
    }
  }
  std::sort(segments_.begin(), segments_.end(), [](const Segment& x, const Segment& y) { return x.base < y.base; });
}

void WriteWindows::Open(uint64_t connection, std::span<const int32_t> pages) {
  MutexLock lock(mu_);
  auto& open = open_[connection];
  for (int32_t p : pages) ++open[p];
}

void WriteWindows::Close(uint64_t connection, std::span<const int32_t> pages) {
  MutexLock lock(mu_);
  auto it = open_.find(connection);
  if (it == open_.end()) return;
  for (int32_t p : pages) {
    auto page = it->second.find(p);
    if (page != it->second.end() && --page->second == 0) it->second.erase(page);
  }
  if (it->second.empty()) open_.erase(it);
}

bool WriteWindows::Allows(uint64_t connection, uint64_t offset, uint64_t bytes) const {
  auto seg = std::upper_bound(segments_.begin(), segments_.end(), offset,
                              [](uint64_t o, const Segment& s) { return o < s.base; });
  if (seg == segments_.begin() || bytes == 0) return false;
  --seg;
  const uint64_t at = offset - seg->base;
  if (at >= seg->bytes || bytes > seg->bytes - at || at % seg->stride != 0 || bytes % seg->stride != 0) return false;
  MutexLock lock(mu_);
  auto it = open_.find(connection);
  if (it == open_.end()) return false;
  for (uint64_t p = at / seg->stride; p < (at + bytes) / seg->stride; ++p) {
    if (!it->second.count(int32_t(p))) return false;
  }
  return true;
}

}  // namespace tandem::transfer
