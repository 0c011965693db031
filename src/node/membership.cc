#include "node/membership.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>

#include "common/log.h"
#include "transfer/handshake.h"

namespace tandem::node {
namespace {

constexpr std::string_view kRecordLabel = "tandem discovery record";
constexpr std::string_view kKvCurveLabel = "tandem kv-events curve key";

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

std::string Hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) out += {digits[b >> 4], digits[b & 15]};
  return out;
}

}  // namespace

StatusOr<Membership> Membership::Load(const std::string& cluster_key_file, bool insecure, const std::string& who) {
  if (cluster_key_file.empty()) return Membership(transfer::ClusterKey{}, insecure, who);
  TANDEM_ASSIGN_OR_RETURN(transfer::ClusterKey key, transfer::ClusterKey::Load(cluster_key_file));
  return Membership(std::move(key), insecure, who);
}

void Membership::Sign(discovery::EngineRecord* r) const {
  if (!key_.enabled()) return;
  r->proof = Hex(key_.Prove(kRecordLabel, {Bytes(r->UnsignedJson())}));
}

Status Membership::Check(const discovery::EngineRecord& r) const {
  if (!key_.enabled()) return transfer::RequireClusterKey("", insecure_, {r.address}, who_);
  const Status refused = PermissionDenied("its record is not signed with this cluster's key");
  if (r.proof.size() != 64 || r.proof.find_first_not_of("0123456789abcdef") != std::string::npos) return refused;
  std::vector<uint8_t> proof;
  auto nibble = [](char c) { return uint8_t(c <= '9' ? c - '0' : c - 'a' + 10); };
  for (size_t i = 0; i < r.proof.size(); i += 2) proof.push_back(uint8_t(nibble(r.proof[i]) << 4 | nibble(r.proof[i + 1])));
  return key_.Verify(kRecordLabel, {Bytes(r.UnsignedJson())}, proof) ? Status::Ok() : refused;
}

std::function<void(discovery::EngineRecord*)> Membership::Signer() const {
  return [self = *this](discovery::EngineRecord* r) { self.Sign(r); };
}

std::function<Status(const discovery::EngineRecord&)> Membership::Checker() const {
  return [self = *this](const discovery::EngineRecord& r) { return self.Check(r); };
}

StatusOr<discovery::KvCurveKeys> Membership::KvKeys() const {
  if (!key_.enabled()) return discovery::KvCurveKeys{};
  return discovery::DeriveKvCurveKeys(key_.Prove(kKvCurveLabel, {}));
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

StatusOr<std::unique_ptr<discovery::KvEventPublisher>> PublishKvEvents(const std::string& host,
                                                                      const std::string& advertise, int port,
                                                                      const Membership& membership) {
  discovery::KvPublisherOptions o;
  o.host = host;
  o.advertise = advertise;
  o.port = port;
  char topic[32];
  std::snprintf(topic, sizeof(topic), "tandem-%016llx", (unsigned long long)transfer::NewInstanceId());
  o.topic = topic;
  TANDEM_ASSIGN_OR_RETURN(o.keys, membership.KvKeys());
  return discovery::KvEventPublisher::Start(std::move(o));
}

}  // namespace tandem::node
