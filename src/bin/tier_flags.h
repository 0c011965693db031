// The cache flags shared by `serve` and `prefill` (the tiers, and the page
// poisoning debug mode), and their re-spelling for the child processes of
// `serve --disagg`.
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
  int64_t debug_copy_delay_us = 0;
  bool debug_ungated_index_k = false;  // tests only: loads open gates before index-K lands
  bool debug_poison_pages = false;     // debug: scribble freed and reserved pages (EngineOptions)

  void AddTo(CLI::App* cmd);
  bool enabled() const { return !host_cache_size.empty(); }
  // The loud warning of a debug flag, once per engine process (not by a launcher).
  void WarnOfFaults() const;
  // Validated options (host_bytes 0 when no --host-cache-size).
  StatusOr<TierOptions> Resolve() const;
  std::vector<std::string> Args() const;
};

// "512M", "2G", "65536" (bytes); K/M/G/T are powers of 1024.
StatusOr<int64_t> ParseBytes(const std::string& flag, const std::string& text);

}  // namespace tandem::cli
