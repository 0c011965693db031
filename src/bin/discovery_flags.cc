#include "bin/discovery_flags.h"

namespace tandem::cli {

void DiscoveryFlags::AddTo(CLI::App* cmd, bool registers) {
  cmd->add_option("--discovery", url,
                  "etcd://HOST:PORT/PREFIX: engines register there (under a lease) and every process finds its peers "
                  "there (a router, the decode servers), beside any addresses given by flags");
  cmd->add_option("--discovery-ttl", ttl_s,
                  "Seconds an engine that stops answering stays registered (its lease; kept alive every third)")
      ->check(CLI::Range(int64_t(2), int64_t(3600)));
  cmd->add_option("--placement", placement,
                  "Where requests go: kv-events (where the KV events of the engines found say the longest prefix "
                  "of the prompt is cached), conversation (where the conversation went before), auto (kv-events "
                  "with --discovery)")
      ->check(CLI::IsMember({"auto", "kv-events", "conversation"}));
  if (registers) {
    cmd->add_option("--kv-events-port", kv_events_port,
                    "With --discovery: the port this engine publishes its prefix cache's KV events on (ZeroMQ; "
                    "snapshots on the next port); 0: any free ports (registered in etcd either way)")
        ->check(CLI::Range(0, 65534));
    cmd->add_option("--advertise", advertise,
                    "With --discovery: the host peers reach this engine at (default: --host, which must then not be "
                    "0.0.0.0)");
  }
}

StatusOr<discovery::DiscoveryOptions> DiscoveryFlags::Options() const {
  discovery::DiscoveryOptions o;
  TANDEM_ASSIGN_OR_RETURN(o.etcd, discovery::ParseEtcdUrl(url));
  o.ttl_s = ttl_s;
  return o;
}

StatusOr<std::string> DiscoveryFlags::Advertised(const std::string& host, int port) const {
  const std::string h = advertise.empty() ? host : advertise;
  if (h.empty() || h == "0.0.0.0" || h == "::" || h == "[::]") {
    return InvalidArgument("--discovery registers where peers reach this engine: listening on '" + host +
                           "', give --advertise HOST");
  }
  return h + ":" + std::to_string(port);
}

StatusOr<bool> DiscoveryFlags::ByKvEvents(bool can, const std::string& why_not) const {
  if (placement == "conversation") return false;
  if (placement == "kv-events" && !enabled()) return InvalidArgument("--placement kv-events follows engines found by --discovery");
  if (placement == "kv-events" && !can) return InvalidArgument("--placement kv-events " + why_not);
  return enabled() && can;
}

}  // namespace tandem::cli
