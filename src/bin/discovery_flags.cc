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
    cmd->add_option("--kv-events-port", kv_events_port,
                    "With --discovery: the port this engine publishes its prefix cache's KV events on (ZeroMQ; "
                    "snapshots on the next port); 0: any free ports (registered in etcd either way)")
        ->check(CLI::Range(0, 65534));
    cmd->add_option("--advertise", advertise,
                    "With --discovery: the host peers reach this engine at (default: --host, which must then not be "
                    "0.0.0.0)");
  }
}

StatusOr<std::unique_ptr<discovery::Discovery>> DiscoveryFlags::Start(const std::string& cluster_key_file, bool insecure,
                                                                      const std::string& who) const {
  discovery::DiscoveryOptions o;
  TANDEM_ASSIGN_OR_RETURN(o.etcd, discovery::ParseEtcdUrl(url));
  o.ttl_s = ttl_s;
  TANDEM_ASSIGN_OR_RETURN(o.seal, RecordSigner(cluster_key_file));
  TANDEM_ASSIGN_OR_RETURN(o.check, RecordChecker(cluster_key_file, insecure, who));
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
  o.port = flags.kv_events_port;
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

namespace {
constexpr std::string_view kRecordLabel = "tandem discovery record";
std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }
std::string Hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) out += {digits[b >> 4], digits[b & 15]};
  return out;
}
}  // namespace

StatusOr<std::function<void(discovery::EngineRecord*)>> RecordSigner(const std::string& cluster_key_file) {
  if (cluster_key_file.empty()) return std::function<void(discovery::EngineRecord*)>([](discovery::EngineRecord*) {});
  TANDEM_ASSIGN_OR_RETURN(transfer::ClusterKey key, transfer::ClusterKey::Load(cluster_key_file));
  return std::function<void(discovery::EngineRecord*)>([key](discovery::EngineRecord* r) {
    r->proof = Hex(key.Prove(kRecordLabel, {Bytes(r->UnsignedJson())}));
  });
}

StatusOr<std::function<Status(const discovery::EngineRecord&)>> RecordChecker(const std::string& cluster_key_file,
                                                                             bool insecure, const std::string& who) {
  using Checker = std::function<Status(const discovery::EngineRecord&)>;
  if (cluster_key_file.empty()) {
    return Checker([insecure, who](const discovery::EngineRecord& r) {
      return transfer::RequireClusterKey("", insecure, {r.address}, who);
    });
  }
  TANDEM_ASSIGN_OR_RETURN(transfer::ClusterKey key, transfer::ClusterKey::Load(cluster_key_file));
  return Checker([key](const discovery::EngineRecord& r) {
    const Status refused = PermissionDenied("its record is not signed with this cluster's key");
    if (r.proof.size() != 64 || r.proof.find_first_not_of("0123456789abcdef") != std::string::npos) return refused;
    std::vector<uint8_t> proof;
    auto nibble = [](char c) { return uint8_t(c <= '9' ? c - '0' : c - 'a' + 10); };
    for (size_t i = 0; i < r.proof.size(); i += 2) proof.push_back(uint8_t(nibble(r.proof[i]) << 4 | nibble(r.proof[i + 1])));
    return key.Verify(kRecordLabel, {Bytes(r.UnsignedJson())}, proof) ? Status::Ok() : refused;
  });
}

std::vector<std::string> MatchingAddresses(const std::vector<discovery::EngineRecord>& records,
                                           const discovery::EngineRecord& want) {
  constexpr size_t kMaxWarned = 64;  // then left out without a word (records are signed: few differ)
  static std::mutex mu;
  static std::set<std::string> warned;  // "address: why", each logged once
  std::vector<std::string> out;
  for (const auto& r : records) {
    std::string why;
    if (!want.layout.empty() && r.layout != want.layout) why = "its cache layout differs (" + r.layout + ")";
    else if (!want.weights.empty() && r.weights != want.weights) why = "its weights differ";
    else if (!want.transport.empty() && r.transport != want.transport) why = "it moves handoffs over " + r.transport;
    if (why.empty()) {
      if (std::find(out.begin(), out.end(), r.address) == out.end()) out.push_back(r.address);
      continue;
    }
    std::lock_guard lock(mu);
    if (warned.size() < kMaxWarned && warned.insert(r.address + ": " + why).second) {
      TLOG_WARN("tandem discovery: leaving out %s %s: %s\n", r.role.c_str(), r.address.c_str(), why.c_str());
    }
  }
  return out;
}

}  // namespace tandem::cli
