// Private to the tiers (tiers.cc, tiers_disk.cc): what both halves share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "prefix/tiers.h"

namespace tandem::tiers_detail {

inline bool SameTokens(const PageTokens& a, std::span<const int32_t> b) {
  return b.size() == a.size() && std::equal(a.begin(), a.end(), b.begin());
}

// L3 page file: this header, then every (buffer, layer) segment of the page
// in ForEachSegment order (cache/page_copy.h): a new buffer needs no change here.
// Version 2: the checksum covers the header too, so a page's bytes are read
// only under the key, parent and tokens they were written for (version 1's
// covered the payload alone: a file copied under another key's name, its
// header edited, was served). Files of another version are removed at start.
struct DiskHeader {
  char magic[8] = {'T', 'D', 'M', 'P', 'A', 'G', 'E', '2'};
  uint64_t key = 0, parent = 0;
  int32_t tokens[kPageTokens] = {};
  uint64_t payload_bytes = 0;
  uint64_t page_xxh3 = 0;  // of this header (this field 0) and the payload
};
static_assert(std::has_unique_object_representations_v<DiskHeader>, "no padding: the checksum covers every byte");

// XXH3 of the header with page_xxh3 zeroed, then the payload.
uint64_t PageChecksum(const DiskHeader& header, std::span<const uint8_t> payload);

// L3's folder for `identity` (its name is a 64-bit hash of it) keeps the
// identity itself in a file, written before the first page: on every start
// it must equal this engine's, so pages of other weights are never read even
// when a folder was copied, renamed or shares a name, and the refusal names
// what differs (FailedPrecondition).
Status ClaimDiskDirectory(const std::string& subdir, const std::string& identity);

}  // namespace tandem::tiers_detail
