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
  // Where etcd is and the lease (the record's seal and check left to the caller).
  StatusOr<discovery::DiscoveryOptions> Options() const;
  // host:port peers should dial: --advertise, else the listening host, which
  // must then be a specific address (not 0.0.0.0 or ::).
  StatusOr<std::string> Advertised(const std::string& host, int port) const;
};

}  // namespace tandem::cli
