// Single-sequence generation: chunked prefill, then one token per step, with
// sampling, stop tokens, stop strings and a token limit. Used by
// `tandem generate`, by tests, and as the shape of the engine's per-request work.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/forward.h"
#include "runtime/request.h"
#include "runtime/sampler.h"

namespace tandem {

struct GenerateOptions {
  SamplingParams sampling;
  int32_t max_tokens = 128;
  std::vector<std::string> stop_strings;
  bool ignore_eos = false;
  int32_t chunk_size = 512;  // prefill tokens per forward step
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (stop tokens excluded)
  std::string text;
  FinishReason finish = FinishReason::kLength;  // kStop or kLength
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

class Generator {
 public:
  // ctx_tokens: the most tokens (prompt + generated) one sequence may hold.
  Generator(const Model& model, const CacheSpec& spec, ThreadPool& threads, int64_t ctx_tokens);

  // on_text receives text as it becomes final (valid UTF-8, stop strings cut);
  // returning false stops generation (FinishReason::kStop).
  StatusOr<GenerateResult> Run(std::span<const int32_t> prompt, const GenerateOptions& options,
                               const std::function<bool(std::string_view)>& on_text);

 private:
  const Model& model_;
  int64_t ctx_tokens_;
  PagePool pool_;
  ForwardPass forward_;
  Sampler sampler_;
};

}  // namespace tandem
