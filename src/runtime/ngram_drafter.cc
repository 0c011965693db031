#include "runtime/ngram_drafter.h"

#include <algorithm>

namespace tandem {

std::vector<int32_t> DraftFromContext(std::span<const int32_t> tokens, int32_t max_tokens,
                                      const NgramDraftOptions& options) {
  const int64_t n = int64_t(tokens.size());
  if (max_tokens <= 0 || options.min_match < 1) return {};
  const int64_t from = std::max<int64_t>(0, n - options.window);
  for (int64_t m = std::min<int64_t>(options.max_match, n - 1); m >= options.min_match; --m) {
    const auto suffix = tokens.subspan(size_t(n - m));
    // The most recent earlier occurrence: its start s, with s + m < n (it is
    // followed by at least one token) — scanned from the newest back.
    for (int64_t s = n - m - 1; s >= from; --s) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + s)) continue;
      const int64_t follow = s + m;
      const int64_t take = std::min<int64_t>(max_tokens, n - follow);
      return std::vector<int32_t>(tokens.begin() + follow, tokens.begin() + follow + take);
    }
  }
  return {};
}

}  // namespace tandem
