#include "decode/write_windows.h"

#include <algorithm>
#include <limits>

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

void WriteWindows::Open(uint64_t connection, uint64_t handoff, std::span<const int32_t> pages) {
  MutexLock lock(mu_);
  Peer& peer = peers_[connection];
  auto [it, fresh] = peer.handoffs.emplace(handoff, std::vector<int32_t>(pages.begin(), pages.end()));
  if (!fresh) return;  // already open
  for (int32_t p : pages) ++peer.pages[p].open;
}

bool WriteWindows::CloseLocked(Peer& peer, std::map<uint64_t, std::vector<int32_t>>::iterator it, uint64_t message) {
  bool quiet = true;
  for (int32_t p : it->second) {
    auto page = peer.pages.find(p);
    if (page == peer.pages.end()) continue;
    if (page->second.put && page->second.last_put >= message) quiet = false;
    if (--page->second.open == 0) peer.pages.erase(page);
  }
  peer.handoffs.erase(it);
  return quiet;
}

void WriteWindows::Close(uint64_t connection, uint64_t handoff) {
  MutexLock lock(mu_);
  auto peer = peers_.find(connection);
  if (peer == peers_.end()) return;
  auto it = peer->second.handoffs.find(handoff);
  if (it != peer->second.handoffs.end()) CloseLocked(peer->second, it, std::numeric_limits<uint64_t>::max());
}

bool WriteWindows::CloseIfQuiet(uint64_t connection, uint64_t handoff, uint64_t message) {
  MutexLock lock(mu_);
  auto peer = peers_.find(connection);
  if (peer == peers_.end()) return true;
  auto it = peer->second.handoffs.find(handoff);
  return it == peer->second.handoffs.end() || CloseLocked(peer->second, it, message);
}

uint64_t WriteWindows::MessageArrived(uint64_t connection) {
  MutexLock lock(mu_);
  return ++peers_[connection].messages;
}

bool WriteWindows::Allows(uint64_t connection, uint64_t offset, uint64_t bytes) {
  auto seg = std::upper_bound(segments_.begin(), segments_.end(), offset,
                              [](uint64_t o, const Segment& s) { return o < s.base; });
  if (seg == segments_.begin() || bytes == 0) return false;
  --seg;
  const uint64_t at = offset - seg->base;
  if (at >= seg->bytes || bytes > seg->bytes - at || at % seg->stride != 0 || bytes % seg->stride != 0) return false;
  MutexLock lock(mu_);
  auto it = peers_.find(connection);
  if (it == peers_.end()) return false;
  Peer& peer = it->second;
  for (uint64_t p = at / seg->stride; p < (at + bytes) / seg->stride; ++p) {
    if (!peer.pages.count(int32_t(p))) return false;
  }
  for (uint64_t p = at / seg->stride; p < (at + bytes) / seg->stride; ++p) {
    Page& page = peer.pages[int32_t(p)];
    page.put = true;
    page.last_put = peer.messages;
  }
  return true;
}

void WriteWindows::Forget(uint64_t connection) {
  MutexLock lock(mu_);
  peers_.erase(connection);
}

}  // namespace tandem::transfer
