// Starts a real `tandem` server process on 127.0.0.1 for end-to-end tests and
// always cleans it up: SIGTERM, then SIGKILL if it does not exit in time.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace tandem::testing {

class ServerProcess {
 public:
  // args: everything after `tandem` (e.g. {"serve", "-m", path}); "--port 0"
  // is appended and the chosen port read from the server's log.
  // marker: the log text right before the port ("http://127.0.0.1:" for
  // HTTP servers, "ucx://127.0.0.1:" or "tcp://127.0.0.1:" for a prefill engine).
  // fixed_port > 0 passes --port fixed_port instead of 0.
  // netns: the network namespace (support/netns.h) it runs in; empty: this one.
  explicit ServerProcess(std::vector<std::string> args, int startup_timeout_s = 60,
                         std::string marker = "http://127.0.0.1:", int fixed_port = 0, std::string netns = "");
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool ok() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  std::string Log() const;
  // Sends SIGTERM and waits; returns the exit code (-1 if killed or timed out).
  int Terminate(int timeout_s = 30);
  void SendSigterm();
  // Waits (bounded) for the process to exit by itself; its exit code, -1 if
  // killed by a signal, nullopt if still running at the deadline.
  std::optional<int> WaitExit(int timeout_s);
  void Kill9();  // no cleanup at all: a crashed peer

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
};

}  // namespace tandem::testing
