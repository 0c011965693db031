// Structured-output load, for `tandem bench structured --isolation` and the
// grammar budget's tests (issue 26, "one structured-output request can slow
// every user"): the worst request a client can send the grammar — n=16
// choices of a recursive schema, each pushed into grammar states never seen
// before at every token — and the ordinary requests it must not slow.
#pragma once

#include <cstdint>
#include <string>

#include "model/tokenizer.h"
#include "runtime/request.h"

namespace tandem::loadgen {

// Arrays nested through a $ref, each level ambiguous between 60 lengths, or a
// string: every '[' keeps up to 256 parses alive, one level deeper.
std::string RecursiveArraySchema();

// Choice `seed` of the worst case: the recursive schema, a logit_bias that
// favours '[' and bans every token that closes an array (so the answer keeps
// going deeper, every token into a new state), temperature 1, `max_tokens`.
RequestSpec GrammarWorstCase(const Tokenizer& tok, uint64_t seed, int32_t max_tokens = 3000);

// Ordinary request `i`: free text (ignoring end of text), and every fourth a
// small object schema; temperature 0.8, `max_tokens`.
RequestSpec OrdinaryRequest(const Tokenizer& tok, int i, int32_t max_tokens = 48);

}  // namespace tandem::loadgen
