// A real etcd (Debian's etcd-server) for tests: its own data directory and
// ports, started in this network namespace or a test host's, up when its
// /health answers, and always stopped. Stop() and Start() again keep the
// data (a restart); Wipe() before Start() loses it (leases too).
#pragma once

#include <sys/types.h>

#include <string>

namespace tandem::testing {

// Where the tests find etcd; empty when it is not installed.
std::string EtcdBinary();

class EtcdProcess {
 public:
  // host: the address it listens on; netns: the test host it runs in ("": here).
  explicit EtcdProcess(std::string host = "127.0.0.1", std::string netns = "");
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // Starts it and waits (bounded) until it answers; false with the log's tail in why().
  bool Start();
  void Stop();  // SIGTERM, then SIGKILL; the data stays
  void Wipe();  // removes the data (call while stopped)
  bool running() const { return pid_ > 0; }
  int port() const { return client_port_; }
  // etcd://HOST:PORT/PREFIX
  std::string Url(const std::string& prefix) const;
  const std::string& why() const { return why_; }

 private:
  std::string host_, netns_, dir_, why_;
  int client_port_ = 0, peer_port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace tandem::testing
