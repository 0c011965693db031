// `tandem bench bystander`: what the worst request of each kind costs
// everyone else (issue 41, "one request stalls the server for a minute"). A
// bystander (a short greedy prompt, 2 tokens) is timed from Submit to its
// end alone, then beside n choices of each hostile request on the same warm
// engine:
//
//   free        plain decoding (the model's own cost: the baseline the rest
//               are compared with)
//   resume      each choice resumes a whole context of one token with 63 stop
//               strings of 127 bytes that never match, ending when its replay
//               does (replay only: no model work)
//   stops       decoding under the same 63 stop strings
//   logit-bias  decoding with the most logit_bias entries a request may send
//   penalties   decoding with repetition, frequency and presence penalties
//   grammar     the grammar's worst case (loadgen/grammar_load.h)
//
// Reported as ratios measured in the same run: each kind's bystander latency
// over the latency alone and over the latency beside plain decoding (what
// the kind's own per-token work adds), with the engine's work counters (the
// most replay one pass of the loop did, the most grammar work one step did).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_source.h"
#include "runtime/engine_options.h"

namespace tandem::bench {

struct BystanderBenchOptions {
  ModelSource model;
  int choices = 16;
  int max_tokens = 128;
  int rounds = 3;
  int64_t context = 2048;
  int64_t replay_tokens_per_pass = EngineOptions{}.replay_tokens_per_pass;
};

int RunBystanderBench(const BystanderBenchOptions& a);

}  // namespace tandem::bench
