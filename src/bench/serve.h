// `tandem bench serve`: throughput and latency percentiles of an
// OpenAI-compatible server at several concurrency levels. Without --url it
// serves the chosen model in-process on a free loopback port.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_source.h"

namespace tandem::bench {

struct ServeBenchOptions {
  ModelSource model;
  std::string url;  // host:port; empty = in-process server
  std::vector<int> concurrency = {1, 8, 32};
  int requests_per_client = 4;
  int max_tokens = 64;
  int prompt_words = 80;
};

int RunServeBench(ServeBenchOptions& a);

}  // namespace tandem::bench
