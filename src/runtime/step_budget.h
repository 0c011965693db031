// How many prompt tokens a step may carry beside decoding sequences, so that
// a burst of prompts cannot hold their next tokens for seconds: the step-time
// target divided by the prompt cost measured on this machine and model.
//
// The cost model is the least a scheduler needs: a step of P prompt tokens
// beside D decoding ones takes about decode_step + P * per_prompt_token,
// where decode_step is the mean of recent steps that carried no prompt
// tokens and per_prompt_token the mean of (time - decode_step) / P over recent
// steps that did. Both are exponential moving averages, so the budget
// follows a prompt cost that grows with context. Chunking never changes a
// result (invariant 5), only when it arrives.
//
// Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>

namespace tandem {

class StepBudget {
 public:
  // target 0: no bound (every step takes what the token budget allows).
  // min_tokens: what a step with decoding sequences always gives prompts,
  // so they progress however slow the machine.
  explicit StepBudget(std::chrono::microseconds target, int64_t min_tokens = 64);

  // A step of `prompt_tokens` and `decode_tokens` took `seconds`.
  void Observe(int64_t prompt_tokens, int64_t decode_tokens, double seconds);
  // Prompt tokens a step beside `decode_tokens` decoding ones may carry:
  // INT64_MAX when there are none, there is no target, or nothing is measured yet.
  int64_t PromptTokens(int64_t decode_tokens) const;

  // Measured prompt throughput (tokens per second); 0 until measured.
  double prompt_tokens_per_second() const;
  double decode_step_seconds() const { return decode_step_s_; }
  // Seconds a prompt token (or a drafted one: the same forward work) adds to a step; 0 until measured.
  double per_prompt_token_seconds() const { return prompt_seen_ && decode_seen_ ? per_prompt_s_ : 0.0; }
  bool enabled() const { return target_s_ > 0; }

 private:
  const double target_s_;
  const int64_t min_tokens_;
  double decode_step_s_ = 0;     // steps without prompt tokens
  double per_prompt_s_ = 0;      // seconds per prompt token beyond decode_step_s_
  bool decode_seen_ = false, prompt_seen_ = false;
};

}  // namespace tandem
