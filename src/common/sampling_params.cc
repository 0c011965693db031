#include "common/sampling_params.h"

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
  return Status::Ok();
}

}  // namespace tandem
