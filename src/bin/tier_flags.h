// The cache-tier flags shared by `serve` and `prefill`, and their re-spelling
// for the child processes of `serve --disagg` (the tiers' faults are
// bin/fault_flags.h's).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "prefix/tiers.h"

namespace tandem::cli {

struct TierFlags {
  std::string host_cache_size, disk_cache_dir, disk_cache_size = "4G", write_policy = "write-through";
  int selective_hits = 2;
  int64_t prefetch_timeout_ms = 2000;

  void AddTo(CLI::App* cmd);
  bool enabled() const { return !host_cache_size.empty(); }
  // Validated options (host_bytes 0 when no --host-cache-size).
  StatusOr<TierOptions> Resolve() const;
  std::vector<std::string> Args() const;
};

// "512M", "2G", "65536" (bytes); K/M/G/T are powers of 1024.
StatusOr<int64_t> ParseBytes(const std::string& flag, const std::string& text);

}  // namespace tandem::cli
