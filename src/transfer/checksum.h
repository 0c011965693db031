// Per-buffer digests of one request's cache pages, carried in Commit and
// checked on arrival, so bytes that landed wrong (or not at all) are visible
// at run time rather than as garbage tokens.
//
// The digests walk the layout, never naming a buffer (invariant 1): a buffer
// added to the registry is digested and verified with no change here.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cache/page_pool.h"
#include "common/status.h"
#include "transfer/messages.h"

namespace tandem {

// For every registered buffer, in registry order: XXH3-64 over that buffer's
// bytes of tokens [first_token, end_token) of every layer, in (layer, page)
// order; within one (layer, page) the token rows, then (for dtypes with
// per-token scales, i.e. layout.scale_offset(b) >= 0) the 4-byte scales of the
// same tokens. Rows outside the range (a cached prefix, the unused tail of the
// last page) are not covered. `bytes` is the number of bytes hashed.
//
// pages[i] holds tokens [kPageTokens * i, kPageTokens * (i + 1)); only the
// pages the range touches are read, so the result does not depend on which
// page ids hold the data.
// REQUIRES: 0 <= first_token <= end_token <= kPageTokens * pages.size(), and
// every page read is a valid page of `pool`.
std::vector<BufferDigest> DigestPages(PagePool& pool, std::span<const int32_t> pages,
                                      int64_t first_token, int64_t end_token);

// Compares a Commit's digests (`expected`) with digests computed here
// (`actual`): same buffer names in the same order, same byte counts, same
// hashes. A mismatch is DataLoss naming the registry buffer, as
// "<name> digest mismatch".
Status VerifyDigests(std::span<const BufferDigest> expected, std::span<const BufferDigest> actual);

}  // namespace tandem
