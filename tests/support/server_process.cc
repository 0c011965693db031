#include "support/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "support/netns.h"
#include "support/paths.h"
#include "support/process.h"
#include "support/wait.h"

namespace tandem::testing {
namespace {

// Reaps `pid` if it exits before `until`: woken by the exit itself (a pidfd),
// not by polling. True with its wait status when it did.
bool ReapBefore(pid_t pid, std::chrono::steady_clock::time_point until, int* status) {
  const int fd = int(syscall(SYS_pidfd_open, pid, 0));
  bool reaped = false;
  for (;;) {
    if (waitpid(pid, status, WNOHANG) == pid) {
      reaped = true;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      (void)poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));  // readable: it exited
    } else {  // no pidfd (an old kernel): a bounded poll of the exit
      std::this_thread::sleep_for(std::min(left, std::chrono::milliseconds(20)));
    }
  }
  if (fd >= 0) close(fd);
  return reaped;
}

}  // namespace

ServerProcess::ServerProcess(std::vector<std::string> args, int startup_timeout_s, std::string marker,
                             int fixed_port, std::string netns) {
  log_path_ = MakeTempDir() + "/server.log";
  // Engines are authenticated by default: a test that gives no key (nor asks
  // for none by name) runs its engines with this test process's shared key,
  // so the sealed protocol is what every end-to-end test speaks.
  auto has = [&](const char* flag) { return std::find(args.begin(), args.end(), flag) != args.end(); };
  // (A router with discovery reads the decode servers' KV events, sealed with the key.)
  const bool engine = !args.empty() && (args[0] == "prefill" ||
                                        (args[0] == "serve" && (has("--prefill") || has("--discovery"))) ||
                                        (args[0] == "router" && has("--discovery")));
  if (engine && !has("--cluster-key-file") && !has("--insecure-no-cluster-key")) {
    static const std::string key = [] {
      const std::string path = MakeTempDir() + "/cluster.key";
      std::ofstream(path) << "the end-to-end tests' shared cluster key\n";
      return path;
    }();
    args.push_back("--cluster-key-file");
    args.push_back(key);
  }
  args.push_back("--port");
  args.push_back(std::to_string(fixed_port));
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    if (!netns.empty() && !EnterNetns(netns)) {
      std::fprintf(stderr, "cannot enter network namespace %s\n", netns.c_str());
      _exit(126);
    }
    std::vector<char*> argv;
    std::string bin = TandemBinary();
    argv.push_back(bin.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  // Up when its log names its port; gone when it exits first.
  WaitUntil(
      [&] {
        const std::string log = Log();
        if (const size_t at = log.find(marker); at != std::string::npos) {
          port_ = std::atoi(log.c_str() + at + marker.size());
          return true;
        }
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          return true;
        }
        return false;
      },
      std::chrono::seconds(startup_timeout_s), std::chrono::milliseconds(20));
}

ServerProcess::~ServerProcess() { Terminate(10); }

std::string ServerProcess::Log() const {
  std::ifstream f(log_path_);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void ServerProcess::Kill9() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

void ServerProcess::SendSigterm() {
  if (pid_ > 0) kill(pid_, SIGTERM);
}

std::optional<int> ServerProcess::WaitExit(int timeout_s) {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  if (!ReapBefore(pid_, std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s), &status)) {
    return std::nullopt;
  }
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int ServerProcess::Terminate(int timeout_s) {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  if (ReapBefore(pid_, std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s), &status)) {
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

}  // namespace tandem::testing
