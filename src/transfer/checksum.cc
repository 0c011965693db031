#include "transfer/checksum.h"

#include <xxhash.h>

#include <algorithm>
#include <memory>

namespace tandem {
namespace {

struct StateDeleter {
  void operator()(XXH3_state_t* state) const { XXH3_freeState(state); }
};

}  // namespace

std::vector<BufferDigest> DigestPages(PagePool& pool, std::span<const int32_t> pages,
                                      int64_t first_token, int64_t end_token) {
  TANDEM_CHECK(0 <= first_token && first_token <= end_token);
  TANDEM_CHECK_MSG(end_token <= kPageTokens * int64_t(pages.size()),
                   "digest range runs past the page list");
  const CacheLayout& layout = pool.layout();
  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  TANDEM_CHECK_MSG(state != nullptr, "XXH3_createState failed");

  const int64_t first_page = first_token / kPageTokens;
  const int64_t end_page =
      first_token == end_token ? first_page : (end_token + kPageTokens - 1) / kPageTokens;
  std::vector<BufferDigest> digests;
  digests.reserve(size_t(layout.n_buffers()));
  for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
    XXH3_64bits_reset(state.get());
    const int64_t row_bytes = layout.row_bytes(b);
    const int64_t scale_offset = layout.scale_offset(b);
    uint64_t hashed = 0;
    auto hash = [&](const uint8_t* data, int64_t n) {
      XXH3_64bits_update(state.get(), data, size_t(n));
      hashed += uint64_t(n);
    };
    for (int l = 0; l < layout.n_layers(); ++l) {
      for (int64_t i = first_page; i < end_page; ++i) {
        const int32_t page = pages[size_t(i)];
        TANDEM_CHECK_MSG(page >= 0 && page < pool.total_pages(), "digest of an invalid page");
        // Token slots [lo, hi) of this page fall in [first_token, end_token).
        const int64_t lo = std::max(first_token, i * kPageTokens) - i * kPageTokens;
        const int64_t hi = std::min(end_token, (i + 1) * kPageTokens) - i * kPageTokens;
        const uint8_t* segment = pool.Segment(b, l, page);
        hash(segment + lo * row_bytes, (hi - lo) * row_bytes);
        if (scale_offset >= 0) hash(segment + scale_offset + lo * 4, (hi - lo) * 4);
      }
    }
    digests.push_back({layout.spec(b).name, XXH3_64bits_digest(state.get()), hashed});
  }
  return digests;
}

Status VerifyDigests(std::span<const BufferDigest> expected, std::span<const BufferDigest> actual) {
  if (expected.size() != actual.size()) {
    return DataLoss("commit carries " + std::to_string(expected.size()) +
                    " buffer digests, this engine has " + std::to_string(actual.size()) +
                    " buffers");
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const BufferDigest& want = expected[i];
    const BufferDigest& got = actual[i];
    if (want.name != got.name) {
      return DataLoss("buffer " + std::to_string(i) + " is '" + got.name + "' here but '" +
                      want.name + "' in the commit");
    }
    if (want.bytes != got.bytes) {
      return DataLoss(got.name + " byte count mismatch: " + std::to_string(want.bytes) +
                      " in the commit, " + std::to_string(got.bytes) + " here");
    }
    if (want.xxh3 != got.xxh3) return DataLoss(got.name + " digest mismatch");
  }
  return Status::Ok();
}

}  // namespace tandem
