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
  // before it (for the penalties); history[prompt_len..] were generated (the
  // frequency and presence penalties count those; -1: none were). allowed:
  // when given, a bitset over the vocab (structured/token_constraint.h) of the
  // only tokens that may be picked. REQUIRES: allowed has a bit set.
  int32_t Sample(std::span<const float> logits, const SamplingParams& params,
                 std::span<const int32_t> history, int64_t position, int64_t prompt_len = -1,
                 const std::vector<uint64_t>* allowed = nullptr);

 private:
  struct Candidate {
    float logit;
    int32_t id;
  };
  std::vector<Candidate> candidates_;  // scratch, reused
  std::vector<float> penalized_;
  std::vector<int32_t> counts_;  // generated tokens per id (zero between calls)

  std::span<const float> Adjust(std::span<const float> logits, const SamplingParams& p,
                                std::span<const int32_t> history, int64_t prompt_len);
};

}  // namespace tandem
