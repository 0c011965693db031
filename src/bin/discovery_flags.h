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

  void AddTo(CLI::App* cmd, bool registers);
  bool enabled() const { return !url.empty(); }
  // The discovery client (not yet registered nor watching).
  StatusOr<std::unique_ptr<discovery::Discovery>> Start() const;
  // host:port peers should dial: --advertise, else the listening host, which
  // must then be a specific address (not 0.0.0.0 or ::).
  StatusOr<std::string> Advertised(const std::string& host, int port) const;
};

// The addresses of `records` (a discovery view), leaving out, with a
// warning logged once each, those that do not match `want` (an empty field of
// want matches anything) or that `allowed` refuses.
std::vector<std::string> MatchingAddresses(const std::vector<discovery::EngineRecord>& records,
                                           const discovery::EngineRecord& want,
                                           const std::function<Status(const std::string&)>& allowed = nullptr);

}  // namespace tandem::cli
