// What a request asks of sampling. Plain data: it travels in the handoff's
// Destination (the first token is sampled where the prompt is computed) and
// is applied by runtime/sampler.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
  // OpenAI's penalties: each token's logit loses frequency_penalty per time
  // it was generated before, and presence_penalty once if it was.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, added to its logit)
  // Structured output (structured/json_schema.h): empty, "json_object" or
  // "json_schema <schema>". Only tokens that keep the answer in it are sampled.
  std::string constraint;
  // The tokens the whole answer may take (the request's max_tokens): a
  // constrained answer is completed within it, also where only its first
  // token is sampled (the prefill engine).
  int32_t answer_budget = 0;

  static constexpr size_t kMaxLogitBias = 1024;
  static constexpr size_t kMaxConstraintBytes = size_t(1) << 20;

  bool operator==(const SamplingParams&) const = default;

  // Rejects out-of-range values with a message naming the parameter.
  Status Validate() const;
};

// The seed a request that sent none is given, where it enters (the server;
// a router that may move it, so every backend continues the same answer):
// 53 random bits, so any JSON reader (a browser's included) gives the exact
// number back when it resumes the stream.
uint64_t FreshSeed();

}  // namespace tandem
