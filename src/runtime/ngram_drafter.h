// Drafts from a sequence's own context (speculative decoding without a
// draft model): agent rounds re-read tool output and echo code and JSON, so
// the tokens that followed the last occurrence of the sequence's newest few
// tokens are often what comes next. A draft is only a proposal: the engine
// checks every drafted token against the draw at its position (runtime/
// engine_draw.cc) and keeps it only when they are equal, so drafts change
// speed, never an answer (invariant 5).
//
// Work per call is bounded: the match is searched in the last `window`
// tokens only (a sequence of any length costs the same per step).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

struct NgramDraftOptions {
  int32_t min_match = 2;   // the fewest newest tokens that must match an earlier span
  int32_t max_match = 4;   // tried first: a longer match is a better predictor
  int64_t window = 4096;   // tokens searched back from the newest
};

// Up to `max_tokens` tokens that followed the most recent earlier occurrence
// of the longest suffix of `tokens` (of max_match down to min_match tokens)
// found in the window; empty when none matches.
std::vector<int32_t> DraftFromContext(std::span<const int32_t> tokens, int32_t max_tokens,
                                      const NgramDraftOptions& options = {});

}  // namespace tandem
