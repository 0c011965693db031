#include "common/sampling_params.h"

#include <random>

namespace tandem {

Status SamplingParams::Validate() const {
  if (!(temperature >= 0.0f && temperature <= 100.0f)) return InvalidArgument("temperature must be in [0, 100]");
  if (top_k < 0) return InvalidArgument("top_k must be >= 0");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgument("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return InvalidArgument("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 10.0f)) {
    return InvalidArgument("repetition_penalty must be in (0, 10]");
  }
  if (repeat_last_n < 0) return InvalidArgument("repeat_last_n must be >= 0");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return InvalidArgument("frequency_penalty must be in [-2, 2]");
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return InvalidArgument("presence_penalty must be in [-2, 2]");
  }
  if (logit_bias.size() > kMaxLogitBias) {
    return InvalidArgument("logit_bias may name at most " + std::to_string(kMaxLogitBias) + " tokens");
  }
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0) return InvalidArgument("logit_bias token ids must be >= 0");
    if (!(bias >= -100.0f && bias <= 100.0f)) return InvalidArgument("logit_bias values must be in [-100, 100]");
  }
  if (constraint.size() > kMaxConstraintBytes) return InvalidArgument("constraint is over 1 MiB");
  if (answer_budget < 0) return InvalidArgument("answer_budget must be >= 0");
  return Status::Ok();
}

uint64_t FreshSeed() {
  std::random_device rd;
  return (uint64_t(rd()) << 32 | rd()) & ((uint64_t(1) << 53) - 1);
}

}  // namespace tandem
