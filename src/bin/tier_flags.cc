#include "bin/tier_flags.h"
#include "common/log.h"

#include <cstdio>
#include <cstdlib>

namespace tandem::cli {

StatusOr<int64_t> ParseBytes(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit = end ? std::string(end) : "";
  double mult = 1;
  if (unit == "K" || unit == "k") {
    mult = 1024.0;
  } else if (unit == "M" || unit == "m") {
    mult = 1024.0 * 1024;
  } else if (unit == "G" || unit == "g") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "T" || unit == "t") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else if (!unit.empty()) {
    return InvalidArgument(flag + " must be a size like 512M or 2G, not '" + text + "'");
  }
  if (end == text.c_str() || !(v > 0)) return InvalidArgument(flag + " must be a positive size, not '" + text + "'");
  return int64_t(v * mult);
}

void TierFlags::AddTo(CLI::App* cmd) {
  cmd->add_option("--host-cache-size", host_cache_size,
                  "L2: a host-memory tier under the prefix cache, e.g. 2G (default: none)");
  cmd->add_option("--disk-cache-dir", disk_cache_dir, "L3: page files here survive restarts (needs --host-cache-size)");
  cmd->add_option("--disk-cache-size", disk_cache_size,
                  "L3 size limit, e.g. 20G (serve --disagg: the decode server's; its prefill engines share another "
                  "of this size equally, each in a folder of its own)");
  cmd->add_option("--cache-write-policy", write_policy, "L1 -> L2: write-through, write-through-selective or write-back");
  cmd->add_option("--cache-selective-hits", selective_hits, "write-through-selective: L1 hits before a page is copied")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--prefetch-timeout-ms", prefetch_timeout_ms,
                  "How long a request waits for its L3 pages before recomputing them")
      ->check(CLI::Range(int64_t(0), int64_t(3600000)));
}

StatusOr<TierOptions> TierFlags::Resolve() const {
  TierOptions t;
  if (host_cache_size.empty()) {
    if (!disk_cache_dir.empty()) return InvalidArgument("--disk-cache-dir needs --host-cache-size (L3 pages pass through L2)");
    return t;
  }
  TANDEM_ASSIGN_OR_RETURN(t.host_bytes, ParseBytes("--host-cache-size", host_cache_size));
  t.disk_dir = disk_cache_dir;
  if (!disk_cache_dir.empty()) {
    TANDEM_ASSIGN_OR_RETURN(t.disk_bytes, ParseBytes("--disk-cache-size", disk_cache_size));
  }
  TANDEM_ASSIGN_OR_RETURN(t.policy, ParseWritePolicy(write_policy));
  t.selective_hits = selective_hits;
  t.prefetch_deadline = std::chrono::milliseconds(prefetch_timeout_ms);
  return t;
}

std::vector<std::string> TierFlags::Args() const {
  std::vector<std::string> a;
  if (host_cache_size.empty()) return a;
  a.insert(a.end(), {"--host-cache-size", host_cache_size, "--cache-write-policy", write_policy,
                                "--cache-selective-hits", std::to_string(selective_hits), "--prefetch-timeout-ms",
                                std::to_string(prefetch_timeout_ms)});
  if (!disk_cache_dir.empty()) a.insert(a.end(), {"--disk-cache-dir", disk_cache_dir, "--disk-cache-size", disk_cache_size});
  return a;
}

}  // namespace tandem::cli
