// "Hosts" for tests of anything across hosts: network namespaces joined by a
// bridge that lives in a namespace of its own, so no address, route or link
// of the machine itself changes and traffic stays inside them. Host i is
// namespace tnd<pid>h<i> with eth0 at 10.77.0.<i+1>/24. Everything is removed
// by the destructor (and namespaces left by a test process that died are
// removed by the next one). Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and
// iproute2; ok() is false, with why(), where they are missing.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tandem::testing {

class TestHosts {
 public:
  explicit TestHosts(int hosts);
  ~TestHosts();
  TestHosts(const TestHosts&) = delete;
  TestHosts& operator=(const TestHosts&) = delete;

  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  int size() const { return int(names_.size()); }
  const std::string& name(int host) const { return names_[size_t(host)]; }
  std::string address(int host) const;  // 10.77.0.<host+1>
  // Cuts host `host` off the bridge (its link down: packets to and from it
  // are lost, as in a partition), and joins it again. False on failure.
  bool Cut(int host);
  bool Join(int host);
  // Runs `fn` on a thread that lives in host `host`'s namespace: every
  // socket it opens is that host's. Returns when fn does.
  void RunIn(int host, const std::function<void()>& fn) const;

 private:
  std::string switch_;             // the bridge's namespace
  std::vector<std::string> names_;  // the hosts' namespaces
  std::string why_;
};

// Moves the calling thread (or, before exec, process) into namespace `name`
// (/run/netns/<name>); false on failure.
bool EnterNetns(const std::string& name);

}  // namespace tandem::testing
