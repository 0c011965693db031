// Runs llama.cpp's llama-bench (a binary the user names; tandem never builds
// or ships it) on the same file as a tandem benchmark, so both engines are
// measured in one run and reported as ratios.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::bench {

struct LlamaBenchPoint {
  double prefill_tps = 0;  // pp<context>
  double decode_tps = 0;   // tg<decode_tokens> at depth <context>
};

// One llama-bench run for each figure (-r 1), with `threads` threads. Each
// run is bounded by `deadline` (killed past it) and must print llama-bench's
// CSV with an avg_ts column.
StatusOr<LlamaBenchPoint> RunLlamaBench(const std::string& binary, const std::string& model, int64_t context,
                                        int decode_tokens, int threads,
                                        std::chrono::seconds deadline = std::chrono::seconds(600));

// The avg_ts of the last row of llama-bench's CSV output (for tests).
StatusOr<double> ParseLlamaBenchCsv(const std::string& csv);

}  // namespace tandem::bench
