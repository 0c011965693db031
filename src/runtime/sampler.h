// Token sampling. Randomness is counter-based (invariant 5): the uniform draw
// for a token is a pure function of (seed, position), so a sequence's tokens
// never depend on what else ran, and no sampler state crosses a handoff.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/sampling_params.h"
#include "common/status.h"

namespace tandem {

// Uniform in [0, 1) from (seed, position); 24 random bits.
float CounterUniform(uint64_t seed, int64_t position);

class Sampler {
 public:
  // Picks the token at `position` from one row of logits. history: the tokens
  // before it (for the repetition penalty).
  int32_t Sample(std::span<const float> logits, const SamplingParams& params,
                 std::span<const int32_t> history, int64_t position);

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };
  std::vector<Candidate> candidates_;  // scratch, reused
  std::vector<float> penalized_;
};

}  // namespace tandem
