#include "bin/disagg_launcher.h"
#include "common/log.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace tandem::cli {
namespace {

// A child process whose output is copied to our stderr with a prefix, and
// watched for the line that announces its port.
class Child {
 public:
  Child(std::string name, std::vector<std::string> args, std::string marker)
      : name_(std::move(name)), marker_(std::move(marker)) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      sigset_t none;
      sigemptyset(&none);
      pthread_sigmask(SIG_SETMASK, &none, nullptr);
      std::vector<char*> argv;
      std::string self = "/proc/self/exe", argv0 = "tandem";
      argv.push_back(argv0.data());
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(self.c_str(), argv.data());
      _exit(127);
    }
    close(fds[1]);
    reader_ = std::thread([this, fd = fds[0]] { Read(fd); });
  }
  ~Child() {
    Stop();
    if (reader_.joinable()) reader_.join();
  }

  // The announced port, or 0 if the child died or said nothing in time.
  int WaitPort(int timeout_s) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (std::chrono::steady_clock::now() < until) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (port_ > 0 || eof_) return port_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 3000; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  void Read(int fd) {
    std::string pending;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
      pending.append(buf, size_t(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        const std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        std::fprintf(stderr, "[%s] %s\n", name_.c_str(), line.c_str());
        const size_t at = line.find(marker_);
        std::lock_guard<std::mutex> lock(mu_);
        if (at != std::string::npos && port_ == 0) port_ = std::atoi(line.c_str() + at + marker_.size());
      }
    }
    close(fd);
    std::lock_guard<std::mutex> lock(mu_);
    eof_ = true;
  }

  std::string name_, marker_;
  pid_t pid_ = -1;
  std::thread reader_;
  std::mutex mu_;
  int port_ = 0;
  bool eof_ = false;
};

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

int RunDisagg(const DisaggLaunch& l) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  const std::string loop = l.host;
  auto prefill = std::make_unique<Child>(
      "prefill", Concat(Concat(Concat({"prefill", "--host", loop, "--port", "0"}, l.model_args), l.attention_args), l.prefill_args),
      "handoffs at " + std::string(l.transport_tcp ? "tcp" : "ucx") + "://" + loop + ":");
  const int prefill_port = prefill->WaitPort(120);
  if (prefill_port <= 0) return TLOG_ERROR("tandem serve --disagg: the prefill engine did not start\n"), 1;
  auto decode = std::make_unique<Child>(
      "decode",
      Concat(Concat(Concat({"serve", "--host", loop, "--port", "0", "--prefill", loop + ":" + std::to_string(prefill_port)},
                           l.model_args),
                    l.attention_args),
             l.decode_args),
      "http://" + loop + ":");
  const int decode_port = decode->WaitPort(120);
  if (decode_port <= 0) return TLOG_ERROR("tandem serve --disagg: the decode server did not start\n"), 1;
  auto router = std::make_unique<Child>(
      "router",
      Concat({"router", "--host", l.host, "--port", std::to_string(l.port), "--decode",
              loop + ":" + std::to_string(decode_port)},
             l.router_args),
      "http://" + l.host + ":");
  const int router_port = router->WaitPort(60);
  if (router_port <= 0) return TLOG_ERROR("tandem serve --disagg: the router did not start\n"), 1;
  TLOG_INFO("tandem serve --disagg: router at http://%s:%d (decode :%d, prefill ucx :%d)\n", l.host.c_str(),
               router_port, decode_port, prefill_port);
  int sig = 0;
  sigwait(&set, &sig);
  TLOG_INFO("tandem serve --disagg: stopping router, decode, prefill\n");
  router.reset();
  decode.reset();
  prefill.reset();
  return 0;
}

}  // namespace tandem::cli
