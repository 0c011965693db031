// `tandem bench structured`: what a response format costs decode. The same
// prompts run free (ignoring end of text, so every answer is max_tokens
// long), as any JSON object, and under a JSON schema; the report gives decode
// tokens/s of each and the ratio to free text, measured in one run, and
// checks every constrained answer parses and is complete. With --isolation,
// what the worst structured-output request costs everyone else's inter-token
// latency, as ratios measured in one run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_source.h"
#include "runtime/engine_options.h"

namespace tandem::bench {

struct StructuredBenchOptions {
  ModelSource model;
  int requests = 32;
  int concurrency = 8;
  int max_tokens = 128;
  bool isolation = false;
  int ordinary = 8;
  int beside = 16;
  int rounds = 3;
  int64_t grammar_work_per_step = EngineOptions{}.grammar_work_per_step;
  double grammar_time_share = EngineOptions{}.grammar_time_share;
};

int RunStructuredBench(const StructuredBenchOptions& a);

}  // namespace tandem::bench
