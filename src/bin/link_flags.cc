#include "bin/link_flags.h"

#include "bin/shared_flags.h"

namespace tandem::cli {

void LinkFlags::AddTo(CLI::App* cmd) {
  AddTransport(cmd, &transport);
  cmd->add_option("--peer-timeout-ms", peer_timeout_ms,
                  "Disaggregated: a peer engine silent this long is declared dead (its connection closed)")
      ->check(CLI::Range(int64_t(100), int64_t(3600) * 1000));
  cmd->add_flag("--allow-mixed-numerics", allow_mixed_numerics,
                "Disaggregated: link to peer engines whose numerics identity differs (another build, during a rolling "
                "upgrade); answers then equal no colocated run exactly, and /v1/models says so (a mixed identity: "
                "verification judges them as drift)");
  AddClusterKey(cmd, &cluster_key_file, &insecure_no_cluster_key);
}

std::vector<std::string> LinkFlags::ToArgs() const {
  std::vector<std::string> args = {"--transport", transport, "--peer-timeout-ms", std::to_string(peer_timeout_ms)};
  if (allow_mixed_numerics) args.push_back("--allow-mixed-numerics");
  return args;
}

}  // namespace tandem::cli
