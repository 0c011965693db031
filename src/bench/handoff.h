// `tandem bench handoff`: how fast the transport moves cache pages from one
// engine's memory into another's scattered pages, against a single-threaded
// page-scatter memcpy measured in the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::bench {

struct HandoffBenchOptions {
  std::vector<int64_t> page_bytes = {16384, 8448};
  int64_t pages = 4096;
  int rounds = 5;
  std::string transport = "auto";
};

int RunHandoffBench(const HandoffBenchOptions& a);

}  // namespace tandem::bench
