// Who belongs to a cluster, as its discovery records say (discovery/): the
// record a node publishes is signed with the cluster key, and a record read
// back is taken only when its proof checks. etcd's writers are not trusted,
// so a record no engine of this cluster wrote — junk, a forgery, one signed
// with another cluster's key — is left out (invariant 7). Without a key,
// nothing is signed, and a reader made `insecure` takes records of loopback
// addresses only (transfer/cluster_key.h); one not made so takes none.
//
// Also derived from the key: the KV events plane's curve keys. And the two
// filters a router or decode server applies to a view: the engines that
// compute what it computes, and those of them that publish KV events.
//
// Thread safety: const methods only; copies share nothing mutable.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "discovery/discovery.h"
#include "discovery/kv_events.h"
#include "transfer/cluster_key.h"

namespace tandem::node {

class Membership {
 public:
  // key: the cluster's, or none (ClusterKey{}). who: "tandem prefill", ... (errors).
  Membership(transfer::ClusterKey key, bool insecure, std::string who)
      : key_(std::move(key)), insecure_(insecure), who_(std::move(who)) {}
  // The key read from `cluster_key_file` ("" for none).
  static StatusOr<Membership> Load(const std::string& cluster_key_file, bool insecure, const std::string& who);

  bool signed_records() const { return key_.enabled(); }
  // Sets r->proof over everything else of the record (a no-op without a key).
  void Sign(discovery::EngineRecord* r) const;
  // OK when the record is this cluster's; PermissionDenied (or, without a
  // key, what RequireClusterKey says) when it is to be left out.
  Status Check(const discovery::EngineRecord& r) const;
  // For DiscoveryOptions::seal and ::check.
  std::function<void(discovery::EngineRecord*)> Signer() const;
  std::function<Status(const discovery::EngineRecord&)> Checker() const;
  // The KV events plane's keys (discovery/kv_events.h); none without a key.
  StatusOr<discovery::KvCurveKeys> KvKeys() const;

 private:
  transfer::ClusterKey key_;
  bool insecure_ = false;
  std::string who_;
};

// The addresses of `records` (a discovery view), each once, leaving out,
// with a warning logged once each, those that do not match `want` (cache
// layout, weights, transport; an empty field of want matches anything).
std::vector<std::string> MatchingAddresses(const std::vector<discovery::EngineRecord>& records,
                                           const discovery::EngineRecord& want);
// The KV event sources of `records` among `addresses` (those that publish).
std::vector<discovery::KvSource> KvSources(const std::vector<discovery::EngineRecord>& records,
                                           const std::vector<std::string>& addresses);
// A node's KV events publisher (a fresh topic), listening on `host`, reached
// at `advertise` (or host), its messages keyed by the membership's curve keys.
StatusOr<std::unique_ptr<discovery::KvEventPublisher>> PublishKvEvents(const std::string& host,
                                                                      const std::string& advertise, int port,
                                                                      const Membership& membership);

}  // namespace tandem::node
