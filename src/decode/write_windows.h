// Which pages of the decode pool each prefill connection may write into: the
// pages it was given in a destination, while that handoff holds them (begun,
// and not yet committed, failed, or freed from quarantine). Where this side
// does the receiving (the TCP transport), every put a peer sends is checked
// here before a byte of it lands (ConnectionHandlers::accept_put): a peer
// that has not authenticated holds no pages, so it writes nowhere; an
// authenticated one writes only into its own handoffs' pages, whole page
// segments of any registered buffer and layer.
//
// Thread safety: every method may be called from any thread (the engine's
// loop opens and closes windows; the transport's reader threads ask).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/layout.h"
#include "common/mutex.h"

namespace tandem::transfer {

class WriteWindows {
 public:
  explicit WriteWindows(const CacheLayout& layout);

  void Open(uint64_t connection, std::span<const int32_t> pages) EXCLUDES(mu_);
  void Close(uint64_t connection, std::span<const int32_t> pages) EXCLUDES(mu_);
  // True when [offset, offset + bytes) of the pool's region is whole page
  // segments, every one of them in a page open to `connection`.
  bool Allows(uint64_t connection, uint64_t offset, uint64_t bytes) const EXCLUDES(mu_);

 private:
  struct Segment {
    uint64_t base = 0, bytes = 0, stride = 0;
  };
  std::vector<Segment> segments_;  // every (buffer, layer) segment, by base; immutable
  mutable Mutex mu_;
  // connection -> page -> how many of its handoffs hold it open
  std::map<uint64_t, std::unordered_map<int32_t, int>> open_ GUARDED_BY(mu_);
};

}  // namespace tandem::transfer
