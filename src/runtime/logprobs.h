// Log-probabilities of a position's next-token distribution, as OpenAI's
// `logprobs` report them: the model's own distribution (log-softmax of the
// raw logits, before temperature, penalties or truncation), for the token
// that was chosen and the most likely alternatives. Computed in one fixed
// order from logits that are themselves bitwise deterministic (invariant 5),
// so a request's logprobs are the same bits alone or batched, on every ISA.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
};

struct PositionLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first; ties by lower id
  bool has_logprob = true;        // false: a prompt's first token (nothing before it predicts it)
};

// OpenAI's limit for top_logprobs.
inline constexpr int kMaxTopLogprobs = 20;

// REQUIRES: 0 <= chosen < logits.size(), 0 <= top_n <= kMaxTopLogprobs.
// NaN logits count as -inf.
PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t chosen, int top_n);

}  // namespace tandem
