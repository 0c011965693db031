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
  cmd->add_option("--debug-copy-delay-us", debug_copy_delay_us, "Tests only: the tier copy engine sleeps per layer")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--debug-ungated-index-k", debug_ungated_index_k,
                "Tests only, UNSAFE: loads from L2 open each layer's gate before its index-K has landed (the "
                "production bug); needs --host-cache-size and sparse attention");
  cmd->add_flag("--debug-poison-pages", debug_poison_pages,
                "Debug: fill every cache page (L1 and L2) with a poison pattern the moment it is freed or reserved, "
                "so a read before its data lands gives garbage (caught by verification), never stale bytes");
}

void TierFlags::WarnOfFaults() const {
  if (debug_poison_pages) {
    TLOG_WARN("WARNING: --debug-poison-pages: every freed or reserved cache page is overwritten with a poison "
              "pattern (debug; costs a page-sized memset per free)\n");
  }
}

StatusOr<TierOptions> TierFlags::Resolve() const {
  TierOptions t;
  if (host_cache_size.empty()) {
    if (!disk_cache_dir.empty()) return InvalidArgument("--disk-cache-dir needs --host-cache-size (L3 pages pass through L2)");
    if (debug_ungated_index_k) return InvalidArgument("--debug-ungated-index-k is a fault of the L2 tier: it needs --host-cache-size");
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
  t.debug_copy_delay = std::chrono::microseconds(debug_copy_delay_us);
  if (debug_copy_delay_us > 0) {
    TLOG_WARN("WARNING: the cache-tier copy engine sleeps %lld us per layer: tests only\n",
                 (long long)debug_copy_delay_us);
  }
  if (debug_ungated_index_k) {
    t.debug_ungated_buffer = "index_k";
    TLOG_WARN("WARNING: --debug-ungated-index-k: loads from L2 open each layer's gate BEFORE its index-K "
                         "has landed (the production bug): tests only\n");
  }
  return t;
}

std::vector<std::string> TierFlags::Args() const {
  std::vector<std::string> a;
  if (debug_poison_pages) a.push_back("--debug-poison-pages");
  if (host_cache_size.empty()) return a;
  a.insert(a.end(), {"--host-cache-size", host_cache_size, "--cache-write-policy", write_policy,
                                "--cache-selective-hits", std::to_string(selective_hits), "--prefetch-timeout-ms",
                                std::to_string(prefetch_timeout_ms)});
  if (!disk_cache_dir.empty()) a.insert(a.end(), {"--disk-cache-dir", disk_cache_dir, "--disk-cache-size", disk_cache_size});
  if (debug_copy_delay_us > 0) a.insert(a.end(), {"--debug-copy-delay-us", std::to_string(debug_copy_delay_us)});
  if (debug_ungated_index_k) a.push_back("--debug-ungated-index-k");
  return a;
}

}  // namespace tandem::cli
