#include "bin/discovery_flags.h"

#include <mutex>
#include <set>

#include "common/log.h"

namespace tandem::cli {

void DiscoveryFlags::AddTo(CLI::App* cmd, bool registers) {
  cmd->add_option("--discovery", url,
                  registers ? "etcd://HOST:PORT/PREFIX: register this engine there (under a lease) and find its "
                              "peers there, instead of (or beside) addresses given here"
                            : "etcd://HOST:PORT/PREFIX: find the decode servers there, instead of (or beside) --decode");
  cmd->add_option("--discovery-ttl", ttl_s,
                  "Seconds an engine that stops answering stays registered (its lease; kept alive every third)")
      ->check(CLI::Range(int64_t(2), int64_t(3600)));
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
