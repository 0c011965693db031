// The discovery flags every role takes (--discovery, --discovery-ttl,
// --advertise) and what each role does with them: prefill engines and decode
// servers register themselves; decode servers follow the prefill engines
// registered, routers the decode servers (discovery/discovery.h).
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "discovery/discovery.h"
#include "discovery/kv_events.h"
#include "node/membership.h"

namespace tandem::cli {

struct DiscoveryFlags {
  std::string url;        // etcd://HOST:PORT/PREFIX; empty: static addresses only
  int64_t ttl_s = 10;     // the registration's lease
  std::string advertise;  // the host peers reach this engine at (default: --host)
  std::string placement = "auto";  // auto | kv-events | conversation
  int kv_events_port = 0;          // this engine's KV events (and + 1: their snapshots); 0: any free ports

  void AddTo(CLI::App* cmd, bool registers);
  bool enabled() const { return !url.empty(); }
  // Whether requests are placed by the KV events of the engines found
  // (auto: with discovery, and where `can` says this role can); an error for
  // a placement this role cannot do.
  StatusOr<bool> ByKvEvents(bool can, const std::string& why_not) const;
  // The discovery client (not yet registered nor watching): its records
  // sealed with the cluster key, and only records proved with it taken;
  // without a key file (`insecure`, tests on one machine) records go unsigned
  // and only those naming loopback addresses are taken.
  // Where etcd is and the lease (the record's seal and check left to the caller).
  StatusOr<discovery::DiscoveryOptions> Options() const;
  StatusOr<std::unique_ptr<discovery::Discovery>> Start(const std::string& cluster_key_file, bool insecure,
                                                        const std::string& who) const;
  // host:port peers should dial: --advertise, else the listening host, which
  // must then be a specific address (not 0.0.0.0 or ::).
  StatusOr<std::string> Advertised(const std::string& host, int port) const;
};

// The KV event keys of a cluster: derived from its key file's secret; none
// without one.
StatusOr<discovery::KvCurveKeys> KvKeys(const std::string& cluster_key_file);
// This engine's KV events publisher: listening on `host`, reached at --advertise (or host).
StatusOr<std::unique_ptr<discovery::KvEventPublisher>> StartKvPublisher(const DiscoveryFlags& flags,
                                                                         const std::string& host,
                                                                         const std::string& cluster_key_file);
// The signed records and the view filters live with the nodes (node/membership.h).
using node::KvSources;
using node::MatchingAddresses;

}  // namespace tandem::cli
