#include "runtime/step_budget.h"

#include <algorithm>
#include <limits>

namespace tandem {
namespace {
constexpr double kWeight = 0.25;  // of the newest step in each moving average

double Blend(bool seen, double mean, double sample) { return seen ? mean + kWeight * (sample - mean) : sample; }
}  // namespace

StepBudget::StepBudget(std::chrono::microseconds target, int64_t min_tokens)
    : target_s_(double(target.count()) * 1e-6), min_tokens_(std::max<int64_t>(1, min_tokens)) {}

void StepBudget::Observe(int64_t prompt_tokens, int64_t decode_tokens, double seconds) {
  if (seconds < 0 || prompt_tokens + decode_tokens <= 0) return;
  if (prompt_tokens == 0) {
    decode_step_s_ = Blend(decode_seen_, decode_step_s_, seconds);
    decode_seen_ = true;
    return;
  }
  // The decode part of a mixed step is its decode steps' mean (none: all of
  // it is the prompts'); a prompt token never costs less than a nanosecond.
  const double prompt_s = std::max(seconds - (decode_tokens > 0 ? decode_step_s_ : 0.0), 0.0);
  per_prompt_s_ = Blend(prompt_seen_, per_prompt_s_, std::max(prompt_s / double(prompt_tokens), 1e-9));
  prompt_seen_ = true;
}

int64_t StepBudget::PromptTokens(int64_t decode_tokens) const {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  if (decode_tokens <= 0 || target_s_ <= 0 || !prompt_seen_) return kNone;
  const double left = target_s_ - decode_step_s_;
  const double tokens = left > 0 ? left / per_prompt_s_ : 0.0;
  if (tokens >= 1e15) return kNone;
  return std::max(min_tokens_, int64_t(tokens + 1e-6));  // 99.99999 tokens are 100
}

double StepBudget::prompt_tokens_per_second() const { return prompt_seen_ ? 1.0 / per_prompt_s_ : 0.0; }

}  // namespace tandem
