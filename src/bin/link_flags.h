// The flags of the link between engines (serve as a decode server or with
// --disagg, prefill), declared once: how handoff bytes travel, when a silent
// peer is dead, whether peers of another numerics identity are linked, and
// the cluster key that authenticates them (invariant 7).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace tandem::cli {

struct LinkFlags {
  std::string transport = "auto";
  int64_t peer_timeout_ms = 5000;
  bool allow_mixed_numerics = false;
  std::string cluster_key_file;
  bool insecure_no_cluster_key = false;

  void AddTo(CLI::App* cmd);
  // For serve --disagg's children: all but the key file, which the launcher
  // passes (it makes one when none was given).
  std::vector<std::string> ToArgs() const;
};

}  // namespace tandem::cli
