#include "support/etcd_process.h"

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "support/netns.h"
#include "support/process.h"
#include "support/wait.h"

namespace tandem::testing {
namespace {

// A port nothing on this host listens on now (the kernel's choice).
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

std::string EtcdBinary() {
  for (const char* p : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
    if (std::filesystem::exists(p)) return p;
  }
  return {};
}

EtcdProcess::EtcdProcess(std::string host, std::string netns) : host_(std::move(host)), netns_(std::move(netns)) {
  dir_ = MakeTempDir();
  // In a test host every port is free; here, ask the kernel.
  client_port_ = netns_.empty() ? FreePort() : 2379;
  peer_port_ = netns_.empty() ? FreePort() : 2380;
}

EtcdProcess::~EtcdProcess() { Stop(); }

std::string EtcdProcess::Url(const std::string& prefix) const {
  return "etcd://" + host_ + ":" + std::to_string(client_port_) + prefix;
}

bool EtcdProcess::Start() {
  if (pid_ > 0) return true;
  const std::string bin = EtcdBinary();
  if (bin.empty()) return (why_ = "etcd is not installed (Debian package etcd-server)"), false;
  const std::string client = "http://" + host_ + ":" + std::to_string(client_port_);
  const std::string peer = "http://" + host_ + ":" + std::to_string(peer_port_);
  std::vector<std::string> args = {bin,
                                   "--name", "test",
                                   "--data-dir", dir_ + "/data",
                                   "--listen-client-urls", client,
                                   "--advertise-client-urls", client,
                                   "--listen-peer-urls", peer,
                                   "--initial-advertise-peer-urls", peer,
                                   "--initial-cluster", "test=" + peer,
                                   "--log-level", "warn"};
  const std::string log = dir_ + "/etcd.log";
  pid_ = fork();
  if (pid_ == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    if (!netns_.empty() && !EnterNetns(netns_)) _exit(126);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  bool up = false;
  auto answers = [&] {
    bool ok = false;
    auto ask = [&] {
      httplib::Client cli(host_, client_port_);
      cli.set_connection_timeout(std::chrono::milliseconds(200));
      cli.set_read_timeout(std::chrono::milliseconds(500));
      auto res = cli.Get("/health");
      ok = res && res->status == 200 && res->body.find("true") != std::string::npos;
    };
    if (netns_.empty()) {
      ask();
    } else {
      std::thread t([&] {
        if (EnterNetns(netns_)) ask();
      });
      t.join();
    }
    return ok;
  };
  up = WaitUntil(
      [&] {
        int status = 0;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          return true;
        }
        return answers();
      },
      std::chrono::seconds(30), std::chrono::milliseconds(50));
  if (!up || pid_ <= 0) {
    std::ifstream f(log);
    std::stringstream s;
    s << f.rdbuf();
    why_ = "etcd did not come up: " + s.str().substr(s.str().size() > 2000 ? s.str().size() - 2000 : 0);
    Stop();
    return false;
  }
  return true;
}

void EtcdProcess::Stop() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status = 0;
  const bool gone = WaitUntil([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, std::chrono::seconds(10),
                              std::chrono::milliseconds(20));
  if (!gone) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
  }
  pid_ = -1;
}

void EtcdProcess::Wipe() {
  std::error_code ec;
  std::filesystem::remove_all(dir_ + "/data", ec);
}

}  // namespace tandem::testing
