// `tandem bench spec`: speculative decoding's cost and gain on one model.
// Every answer is also checked: the same tokens with and without drafts
// (invariant 5), or the run says so and exits 1.
//
// - For each --speculate value, drafts from the sequence's own context
//   (runtime/ngram_drafter.h): acceptance (kept / drafted), tokens per step,
//   decode tokens a second and the speedup against no drafts, same run.
// - The verify step's cost: one forward pass over 1 + k positions of one
//   sequence against a pass over 1, at --context tokens of context.
// - The curve of speedup against acceptance, from drafts whose acceptance is
//   set: SetAcceptanceDrafter (a benchmark-only proposer) drafts the
//   reference answer's own next tokens, each replaced by a wrong one with
//   probability 1 - acceptance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_source.h"

namespace tandem::bench {

struct SpecBenchOptions {
  ModelSource model;
  std::vector<int> speculate = {2, 4, 8};
  std::vector<double> acceptance = {0.0, 0.5, 0.8, 0.95, 1.0};
  int requests = 4;
  int max_tokens = 128;
  int64_t context = 512;
  int repeat = 3;  // runs of each configuration: the median time
};

int RunSpecBench(const SpecBenchOptions& a);

}  // namespace tandem::bench
