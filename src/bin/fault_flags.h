// The fault flags (--debug-*), declared once for `serve` and `prefill`,
// resolved into the fault library's options (faults/fault_options.h), and
// re-spelled for the child processes of `serve --disagg`. Tests only: each
// one that is set says so loudly when it is resolved.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "common/status.h"
#include "faults/fault_options.h"

namespace tandem::cli {

struct FaultFlags {
  int64_t put_delay_us = 0;
  double bit_flip_rate = 0;
  int64_t wedge_after_messages = -1;
  bool unsafe_early_commit = false;
  int64_t copy_delay_us = 0;
  bool ungated_index_k = false;
  bool poison_pages = false;
  std::string numerics_variant;  // faults/numerics_variant.h; serve --disagg: the prefill engines'

  void AddTo(CLI::App* cmd);
  bool transport_any() const {
    return put_delay_us > 0 || bit_flip_rate > 0 || wedge_after_messages >= 0 || unsafe_early_commit;
  }
  // `tiers`: whether the engine has a host tier (the ungated fault is one of
  // its loads). `engine`: this process runs the engine, so it says loudly
  // which faults are on (a launcher only passes them on, quietly), and
  // installs the numerics variant.
  StatusOr<faults::FaultOptions> Resolve(bool tiers, bool engine = true) const;
  // For each prefill engine of serve --disagg (the handoff's sender side, and
  // the numerics variant: a rolling upgrade half done).
  std::vector<std::string> TransportArgs() const;
  // For every engine (the cache's faults).
  std::vector<std::string> CacheArgs() const;
};

}  // namespace tandem::cli
