#include "bin/discovery_flags.h"

#include <mutex>
#include <set>

#include "common/log.h"
#include "transfer/cluster_key.h"
#include "transfer/handshake.h"

namespace tandem::cli {

void DiscoveryFlags::AddTo(CLI::App* cmd, bool registers) {
  cmd->add_option("--discovery", url,
                  registers ? "etcd://HOST:PORT/PREFIX: register this engine there (under a lease) and find its "
                              "peers there, instead of (or beside) addresses given here"
                            : "etcd://HOST:PORT/PREFIX: find the decode servers there, instead of (or beside) --decode");
  cmd->add_option("--discovery-ttl", ttl_s,
                  "Seconds an engine that stops answering stays registered (its lease; kept alive every third)")
      ->check(CLI::Range(int64_t(2), int64_t(3600)));
  cmd->add_option("--placement", placement,
                  "Where requests go: kv-events (where the KV events of the engines found say the longest prefix "
                  "of the prompt is cached), conversation (where the conversation went before), auto (kv-events "
                  "with --discovery)")
      ->check(CLI::IsMember({"auto", "kv-events", "conversation"}));
  if (registers) {
    cmd->add_option("--advertise", advertise,
                    "With --discovery: the host peers reach this engine at (default: --host, which must then not be "
                    "0.0.0.0)");
  }
}

StatusOr<std::unique_ptr<discovery::Discovery>> DiscoveryFlags::Start() const {
  discovery::DiscoveryOptions o;
  TANDEM_ASSIGN_OR_RETURN(o.etcd, discovery::ParseEtcdUrl(url));
  o.ttl_s = ttl_s;
  return std::make_unique<discovery::Discovery>(std::move(o));
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

StatusOr<discovery::KvCurveKeys> KvKeys(const std::string& cluster_key_file) {
  if (cluster_key_file.empty()) return discovery::KvCurveKeys{};
  TANDEM_ASSIGN_OR_RETURN(transfer::ClusterKey key, transfer::ClusterKey::Load(cluster_key_file));
  return discovery::DeriveKvCurveKeys(key.Prove("tandem kv-events curve key", {}));
}

StatusOr<std::unique_ptr<discovery::KvEventPublisher>> StartKvPublisher(const DiscoveryFlags& flags,
                                                                         const std::string& host,
                                                                         const std::string& cluster_key_file) {
  discovery::KvPublisherOptions o;
  o.host = host;
  o.advertise = flags.advertise;
  char topic[32];
  std::snprintf(topic, sizeof(topic), "tandem-%016llx", (unsigned long long)transfer::NewInstanceId());
  o.topic = topic;
  TANDEM_ASSIGN_OR_RETURN(o.keys, KvKeys(cluster_key_file));
  return discovery::KvEventPublisher::Start(std::move(o));
}

std::vector<discovery::KvSource> KvSources(const std::vector<discovery::EngineRecord>& records,
                                           const std::vector<std::string>& addresses) {
  std::vector<discovery::KvSource> out;
  for (const auto& r : records) {
    if (r.kv_events.empty() || r.kv_snapshot.empty() || r.kv_topic.empty()) continue;
    if (std::find(addresses.begin(), addresses.end(), r.address) == addresses.end()) continue;
    out.push_back({r.address, r.kv_topic, r.kv_events, r.kv_snapshot});
  }
  return out;
}

std::vector<std::string> MatchingAddresses(const std::vector<discovery::EngineRecord>& records,
                                           const discovery::EngineRecord& want,
                                           const std::function<Status(const std::string&)>& allowed) {
  static std::mutex mu;
  static std::set<std::string> warned;  // "address: why", each logged once
  std::vector<std::string> out;
  for (const auto& r : records) {
    std::string why;
    if (!want.layout.empty() && r.layout != want.layout) why = "its cache layout differs (" + r.layout + ")";
    else if (!want.weights.empty() && r.weights != want.weights) why = "its weights differ";
    else if (!want.transport.empty() && r.transport != want.transport) why = "it moves handoffs over " + r.transport;
    else if (allowed) {
      if (Status st = allowed(r.address); !st.ok()) why = st.message();
    }
    if (why.empty()) {
      if (std::find(out.begin(), out.end(), r.address) == out.end()) out.push_back(r.address);
      continue;
    }
    std::lock_guard lock(mu);
    if (warned.insert(r.address + ": " + why).second) {
      TLOG_WARN("tandem discovery: leaving out %s %s: %s\n", r.role.c_str(), r.address.c_str(), why.c_str());
    }
  }
  return out;
}

}  // namespace tandem::cli
