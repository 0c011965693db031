#include "support/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "support/process.h"

namespace tandem::testing {
namespace {

// Namespaces of test processes that no longer run (a test killed mid-way).
void RemoveOrphans() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind("tnd", 0) != 0) continue;
    const long pid = std::atol(n.c_str() + 3);
    if (pid > 0 && kill(pid_t(pid), 0) != 0 && errno == ESRCH) RunShell("ip netns del " + n, 10);
  }
}

}  // namespace

bool EnterNetns(const std::string& name) {
  const int fd = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = setns(fd, CLONE_NEWNET) == 0;
  close(fd);
  return ok;
}

TestHosts::TestHosts(int hosts) {
  if (geteuid() != 0) {
    why_ = "not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN";
    return;
  }
  if (RunShell("ip -V", 10).exit_code != 0) {
    why_ = "iproute2's ip is not installed";
    return;
  }
  RemoveOrphans();
  const std::string base = "tnd" + std::to_string(getpid());
  static int made = 0;  // several sets in one test process
  const std::string tag = base + "n" + std::to_string(made++);
  switch_ = tag + "sw";
  std::string script = "set -e; ip netns add " + switch_ + "; ip -n " + switch_ + " link add br0 type bridge; ip -n " +
                       switch_ + " link set br0 up; ip -n " + switch_ + " link set lo up; ";
  for (int i = 0; i < hosts; ++i) {
    const std::string host = tag + "h" + std::to_string(i);
    names_.push_back(host);
    const std::string veth = "v" + std::to_string(i);
    script += "ip netns add " + host + "; ip -n " + host + " link set lo up; ip -n " + switch_ + " link add " + veth +
              " type veth peer name eth0 netns " + host + "; ip -n " + switch_ + " link set " + veth +
              " master br0 up; ip -n " + host + " addr add " + address(i) + "/24 dev eth0; ip -n " + host +
              " link set eth0 up; ";
  }
  const ProcessResult r = RunShell(script, 60);
  if (r.exit_code != 0) why_ = "creating the test hosts failed: " + r.output;
}

TestHosts::~TestHosts() {
  std::string script;
  for (const std::string& n : names_) script += "ip netns del " + n + " 2>/dev/null; ";
  if (!switch_.empty()) script += "ip netns del " + switch_ + " 2>/dev/null; ";
  script += "true";
  RunShell(script, 30);
}

std::string TestHosts::address(int host) const { return "10.77.0." + std::to_string(host + 1); }

bool TestHosts::Cut(int host) {
  return RunShell("ip -n " + switch_ + " link set v" + std::to_string(host) + " down", 10).exit_code == 0;
}

bool TestHosts::Join(int host) {
  return RunShell("ip -n " + switch_ + " link set v" + std::to_string(host) + " up", 10).exit_code == 0;
}

void TestHosts::RunIn(int host, const std::function<void()>& fn) const {
  std::thread t([&] {
    if (EnterNetns(name(host))) fn();  // a thread's namespace is its own: the test's other threads stay put
  });
  t.join();
}

}  // namespace tandem::testing
