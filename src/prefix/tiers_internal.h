// Private to the tiers (tiers.cc, tiers_disk.cc): what both halves share.
#pragma once

#include <algorithm>
#include <span>

#include "prefix/tiers.h"

namespace tandem::tiers_detail {

inline bool SameTokens(const PageTokens& a, std::span<const int32_t> b) {
  return b.size() == a.size() && std::equal(a.begin(), a.end(), b.begin());
}

// L3 page file: this header, then every (buffer, layer) segment of the page
// in ForEachSegment order (cache/page_copy.h): a new buffer needs no change here.
struct DiskHeader {
  char magic[8] = {'T', 'D', 'M', 'P', 'A', 'G', 'E', '1'};
  uint64_t key = 0, parent = 0;
  int32_t tokens[kPageTokens] = {};
  uint64_t payload_bytes = 0;
  uint64_t payload_xxh3 = 0;
};

}  // namespace tandem::tiers_detail
