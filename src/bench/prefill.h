// `tandem bench prefill`: the prefill engine under an agent-shaped burst, in
// one process over the loopback transport. Every request is a conversation's
// next round: a prefix both sides have cached (a warm-up round computed it)
// plus 300..2000 new tokens. All of them arrive at once; the time from each
// Destination to its Commit is that request's time to first token on the
// prefill side. The same burst runs on the batching scheduler and with one
// prompt at a time (--max-running 1: what the prefill worker did before it
// ran on the shared engine), so the ratio is measured in one run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_source.h"

namespace tandem::bench {

struct PrefillBenchOptions {
  ModelSource model;
  int requests = 64;
  int64_t prefix_tokens = 1024;
  int64_t new_min = 300, new_max = 2000;
  int32_t chunk_size = 512, max_batch_tokens = 2048, max_running = 64;
  std::string attention = "dense";
};

int RunPrefillBench(const PrefillBenchOptions& a);

}  // namespace tandem::bench
