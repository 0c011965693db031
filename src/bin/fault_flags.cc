#include "bin/fault_flags.h"

#include <sstream>

#include "common/log.h"
#include "faults/numerics_variant.h"

namespace tandem::cli {

void FaultFlags::AddTo(CLI::App* cmd) {
  cmd->add_flag("--debug-unsafe-early-commit", unsafe_early_commit,
                "UNSAFE, tests only: prefill engines commit before the index-K writes are flushed (needs sparse "
                "attention)");
  cmd->add_option("--debug-put-delay-us", put_delay_us, "Tests only: prefill engines delay every page write")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--debug-bit-flip-rate", bit_flip_rate,
                  "Tests only: prefill engines flip one bit in this share of page writes")
      ->check(CLI::Range(0.0, 1.0))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a fault-control restart's own rate wins
  cmd->add_option("--debug-wedge-after-messages", wedge_after_messages,
                  "Tests only: after sending this many messages on a connection (counted from its Hello), a prefill "
                  "engine sends none (commits and abort acknowledgements never arrive: a wedged engine that stays connected)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--debug-copy-delay-us", copy_delay_us, "Tests only: the tier copy engine sleeps per layer")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--debug-ungated-index-k", ungated_index_k,
                "Tests only, UNSAFE: loads from L2 open each layer's gate before its index-K has landed (the "
                "production bug); needs --host-cache-size and sparse attention");
  cmd->add_flag("--debug-poison-pages", poison_pages,
                "Debug: fill every cache page (L1 and L2) with a poison pattern the moment it is freed or reserved, "
                "so a read before its data lands gives garbage (caught by verification), never stale bytes");
  cmd->add_option("--debug-numerics-variant", numerics_variant,
                  std::string("Tests only: kernels that round differently (") + faults::NumericsVariantNames() +
                      "), standing for another build: the numerics identity says so (with --disagg: the prefill "
                      "engines')");
}

StatusOr<faults::FaultOptions> FaultFlags::Resolve(bool tiers, bool engine) const {
  if (ungated_index_k && !tiers) {
    return InvalidArgument("--debug-ungated-index-k is a fault of the L2 tier: it needs --host-cache-size");
  }
  faults::FaultOptions f;
  f.put_delay = std::chrono::microseconds(put_delay_us);
  f.bit_flip_rate = bit_flip_rate;
  f.wedge_after_messages = wedge_after_messages;
  f.unsafe_early_commit = unsafe_early_commit;
  if (tiers) f.tiers.copy_delay = std::chrono::microseconds(copy_delay_us);  // a fault of the tiers' copy engine
  if (ungated_index_k) f.tiers.ungated_buffer = "index_k";
  f.poison_pages = poison_pages;
  if (!engine) return f;
  if (!numerics_variant.empty()) {
    TANDEM_RETURN_IF_ERROR(faults::InstallNumericsVariant(numerics_variant));
    TLOG_WARN("WARNING: --debug-numerics-variant %s: this engine's kernels round differently from this build's "
              "(its numerics identity says so): tests only\n",
              numerics_variant.c_str());
  }
  if (poison_pages) {
    TLOG_WARN("WARNING: --debug-poison-pages: every freed or reserved cache page is overwritten with a poison "
              "pattern (debug; costs a page-sized memset per free)\n");
  }
  if (copy_delay_us > 0 && tiers) {
    TLOG_WARN("WARNING: the cache-tier copy engine sleeps %lld us per layer: tests only\n", (long long)copy_delay_us);
  }
  if (ungated_index_k) {
    TLOG_WARN("WARNING: --debug-ungated-index-k: loads from L2 open each layer's gate BEFORE its index-K "
              "has landed (the production bug): tests only\n");
  }
  return f;
}

std::vector<std::string> FaultFlags::TransportArgs() const {
  std::vector<std::string> a;
  if (unsafe_early_commit) a.push_back("--debug-unsafe-early-commit");
  if (put_delay_us > 0) a.insert(a.end(), {"--debug-put-delay-us", std::to_string(put_delay_us)});
  if (bit_flip_rate > 0) {
    std::ostringstream rate;
    rate.precision(17);
    rate << bit_flip_rate;
    a.insert(a.end(), {"--debug-bit-flip-rate", rate.str()});
  }
  if (wedge_after_messages >= 0) {
    a.insert(a.end(), {"--debug-wedge-after-messages", std::to_string(wedge_after_messages)});
  }
  if (!numerics_variant.empty()) a.insert(a.end(), {"--debug-numerics-variant", numerics_variant});
  return a;
}

std::vector<std::string> FaultFlags::CacheArgs() const {
  std::vector<std::string> a;
  if (poison_pages) a.push_back("--debug-poison-pages");
  if (copy_delay_us > 0) a.insert(a.end(), {"--debug-copy-delay-us", std::to_string(copy_delay_us)});
  if (ungated_index_k) a.push_back("--debug-ungated-index-k");
  return a;
}

}  // namespace tandem::cli
