// Runs one request on an in-process engine and collects its tokens (bounded:
// 60 s for each event); a failure to finish fails the test.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/engine.h"

namespace tandem::testing {

// Up to `max_tokens` tokens of `prompt` (EOS ignored); `cached`, when given,
// gets the prompt tokens the engine found cached.
// `cache_salt`: the request's tenant (RequestSpec::cache_salt).
std::vector<int32_t> AskEngine(Engine& engine, const std::vector<int32_t>& prompt, int64_t max_tokens,
                               int64_t* cached = nullptr, uint64_t cache_salt = 0);

}  // namespace tandem::testing
