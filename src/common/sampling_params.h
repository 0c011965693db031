// What a request asks of sampling. Plain data: it travels in the handoff's
// Destination (the first token is sampled where the prompt is computed) and
// is applied by runtime/sampler.h.
#pragma once

#include <cstdint>

#include "common/status.h"

namespace tandem {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;
  int32_t repeat_last_n = 64;
  uint64_t seed = 0;

  // Rejects out-of-range values with a message naming the parameter.
  Status Validate() const;
};

}  // namespace tandem
