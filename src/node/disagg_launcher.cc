#include "node/stop_signals.h"
#include "node/disagg_launcher.h"

#include "node/supervisor.h"
#include "common/env.h"
#include "transfer/cluster_key.h"
#include "common/log.h"

#include <fcntl.h>
#include <filesystem>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/access.h"
#include "server/listen_backlog.h"

namespace tandem::node {
namespace {

// A child process whose output is copied to our stderr with a prefix, and
// watched for the line that announces its port.
class Child {
 public:
  Child(std::string name, std::vector<std::string> args, std::string marker)
      : name_(std::move(name)), marker_(std::move(marker)) {
    int fds[2];
    // Close-on-exec: another child forked meanwhile must not hold this one's
    // pipe open (its reader would then never see this child's end).
    if (pipe2(fds, O_CLOEXEC) != 0) return;
    // Everything the child needs is built before fork: between fork and exec
    // only async-signal-safe calls (another thread may hold malloc's lock).
    std::string argv0 = "tandem";
    std::vector<char*> argv;
    argv.push_back(argv0.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t launcher = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // The launcher gone (even by SIGKILL), its children follow: no
      // orphaned server keeps a port the next launcher wants.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher) _exit(1);  // it died before the line above
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      sigset_t none;
      sigemptyset(&none);
      pthread_sigmask(SIG_SETMASK, &none, nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    close(fds[1]);
    TLOG_INFO("tandem serve --disagg: %s started (pid %d)\n", name_.c_str(), int(pid_));
    reader_ = std::thread([this, fd = fds[0]] { Read(fd); });
  }
  ~Child() {
    Stop();
    if (reader_.joinable()) reader_.join();
  }

  // The announced port, or 0 if the child died or said nothing in time, or
  // kSignalled when one of `signals` came meanwhile (taken: only the thread
  // that waits for the launcher's signals passes them).
  static constexpr int kSignalled = -1;
  int WaitPort(int timeout_s, const sigset_t* signals = nullptr) {
    const auto until = Env::Default().Now() + std::chrono::seconds(timeout_s);
    while (Env::Default().Now() < until) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (port_ > 0 || eof_) return port_;
      }
      if (signals == nullptr) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      } else if (const timespec ts{0, 10'000'000}; sigtimedwait(signals, nullptr, &ts) >= 0) {
        return kSignalled;
      }
    }
    return 0;
  }

  bool alive() const { return pid_ > 0; }

  // Whether the child exited by itself (reaped now); `how` says how, and
  // `clean` whether it exited with code 0 (a server does only after a drain).
  bool Exited(std::string* how, bool* clean) {
    int status = 0;
    if (pid_ <= 0 || waitpid(pid_, &status, WNOHANG) != pid_) return false;
    pid_ = -1;
    *clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    *how = WIFSIGNALED(status) ? std::string("killed by signal ") + std::to_string(WTERMSIG(status))
                               : "exited with code " + std::to_string(WEXITSTATUS(status));
    return true;
  }
  pid_t pid() const { return pid_; }

  // SIGKILL, and reaped: the fault of a crash.
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  bool Signal(int sig) { return pid_ > 0 && kill(pid_, sig) == 0; }

  // SIGTERM (it drains and exits), without waiting.
  void Terminate() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);  // a stopped child takes SIGTERM only once it runs
    kill(pid_, SIGTERM);
  }

  // Terminate, then wait (up to 60 s: a drain's --shutdown-timeout and the
  // server's own stop) before SIGKILL.
  void Stop() {
    if (pid_ <= 0) return;
    Terminate();
    int status = 0;
    for (int i = 0; i < 6000; ++i) {
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

// The children of one kind (prefill engines, decode servers, the router):
// started on any free port, restarted on the one they had. A start waits
// for the child's port without holding the lock (up to 120 s), so a
// shutdown never waits behind it.
class ChildSlots {
 public:
  // Child i on `port` (0: any), with `extra` arguments.
  using Spawn = std::function<std::shared_ptr<Child>(int i, int port, const std::vector<std::string>& extra)>;
  ChildSlots(std::string kind, std::function<std::string(int)> name, Spawn spawn)
      : kind_(std::move(kind)), name_(std::move(name)), spawn_(std::move(spawn)) {}

  const std::string& kind() const { return kind_; }
  // Its supervisor name ("decode server 1").
  std::string Name(int i) const { return name_(i); }

  // Starts child i on `port` (0: any) with `extra` arguments; its port, or 0,
  // or Child::kSignalled (Child::WaitPort).
  int Start(int i, int port, const std::vector<std::string>& extra, const sigset_t* signals = nullptr) {
    std::shared_ptr<Child> child;  // alive while we wait, whatever happens to the slot
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return 0;
      if (int(slots_.size()) <= i) slots_.resize(size_t(i) + 1);
      Slot& s = slots_[size_t(i)];
      if (s.child) s.child->Stop();  // the previous one, if any
      s.child = child = spawn_(i, port, extra);
    }
    const int got = child->WaitPort(120, signals);  // returns at once when the child is stopped or dies
    if (got == Child::kSignalled) return got;
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || size_t(i) >= slots_.size() || slots_[size_t(i)].child != child) return 0;
    if (got > 0) slots_[size_t(i)].port = got;
    return got;
  }

  // A fault-control request: kill | restart [bit_flip_rate] | stop | cont |
  // drain (SIGTERM: it finishes what it holds, exits, and the supervisor
  // starts it again). Returns the answer's status and body.
  std::pair<int, std::string> Apply(int i, const std::string& action, double bit_flip_rate) {
    int port = 0;
    const std::string name = Name(i);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (i < 0 || i >= int(slots_.size())) return {404, "no " + kind_ + " " + std::to_string(i)};
      Slot& s = slots_[size_t(i)];
      if (action == "kill") {
        s.held_down = true;  // a fault: stays down until restarted by request, not by supervision
        if (s.child) s.child->Kill();
      } else if (action == "stop" || action == "cont" || action == "drain") {
        const int sig = action == "stop" ? SIGSTOP : action == "cont" ? SIGCONT : SIGTERM;
        if (s.held_down || !s.child || !s.child->Signal(sig)) return {409, name + " is not running"};
      } else if (action == "restart") {
        s.held_down = false;
      } else {
        return {400, "unknown action '" + action + "' (kill, restart, stop, cont, drain)"};
      }
      port = s.port;
    }
    if (action == "restart") {
      std::vector<std::string> extra;
      char rate[32];
      std::snprintf(rate, sizeof(rate), "%.17g", bit_flip_rate);
      if (bit_flip_rate > 0) extra = {"--debug-bit-flip-rate", rate};
      if (Start(i, port, extra) <= 0) return {500, name + " did not start again"};
    }
    TLOG_WARN("fault control: %s: %s%s\n", name.c_str(), action.c_str(),
              bit_flip_rate > 0 ? (std::string(" with bit flips in ") + std::to_string(bit_flip_rate) + " of its page writes").c_str() : "");
    return {200, name + ": " + action};
  }

  // The children that exited by themselves since the last call (a fault
  // control kill is not one), for the supervisor to restart.
  struct Exit {
    int child;
    std::string how;
    bool drained;  // exited cleanly: a drain, not a crash
  };
  std::vector<Exit> Reap() {
    std::vector<Exit> out;
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < slots_.size(); ++i) {
      std::string how;
      bool clean = false;
      if (slots_[i].child && !slots_[i].held_down && slots_[i].child->Exited(&how, &clean)) {
        out.push_back({int(i), how, clean});
      }
    }
    return out;
  }
  int port(int i) {
    std::lock_guard<std::mutex> lock(mu_);
    return size_t(i) < slots_.size() ? slots_[size_t(i)].port : 0;
  }

  // Stops every child (all drain at once); starts after this do nothing.
  void StopAll() {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    for (Slot& s : slots_) {
      if (s.child) s.child->Terminate();
    }
    for (Slot& s : slots_) {
      if (s.child) s.child->Stop();  // at most 60 s, then SIGKILL
    }
    slots_.clear();
  }

 private:
  struct Slot {
    std::shared_ptr<Child> child;
    int port = 0;
    bool held_down = false;  // killed through fault control: not restarted by the supervisor
  };

  const std::string kind_;
  const std::function<std::string(int)> name_;
  const Spawn spawn_;
  std::mutex mu_;
  std::vector<Slot> slots_;
  bool stopping_ = false;
};

// --debug-fault-control: POST /debug/<kind>/<i> {"action": ..., "bit_flip_rate": r},
// kind prefill, decode or router, with 'Authorization: Bearer <key>': the
// key the launcher wrote into its private folder (mode 0600), so only the
// user who started it can use it (invariant 10). A request a web page
// sends (it carries Origin) is refused whatever it holds; the listener is on
// loopback only.
std::unique_ptr<httplib::Server> StartFaultControl(const std::vector<ChildSlots*>& kinds, std::string key, int* port) {
  auto server = std::make_unique<httplib::Server>();
  server->Post(R"(/debug/(\w+)/(\d+))", [kinds, key](const httplib::Request& req, httplib::Response& res) {
    if (req.has_header("Origin")) {
      res.status = 403;
      res.set_content("fault control takes no requests from web pages", "text/plain");
      return;
    }
    if (!ConstantTimeEqual(BearerToken(req.get_header_value("Authorization")), key)) {
      res.status = 401;
      res.set_content("fault control needs 'Authorization: Bearer <key>' with the key in the file the launcher "
                      "named when it started",
                      "text/plain");
      return;
    }
    std::string action;
    double rate = 0;
    try {
      const auto body = nlohmann::json::parse(req.body);
      action = body.at("action").get<std::string>();
      rate = body.value("bit_flip_rate", 0.0);
    } catch (const std::exception& e) {
      res.status = 400;
      res.set_content(std::string("bad fault request: ") + e.what(), "text/plain");
      return;
    }
    if (!(rate >= 0 && rate <= 1)) {
      res.status = 400;
      res.set_content("bit_flip_rate must be in [0, 1]", "text/plain");
      return;
    }
    for (ChildSlots* slots : kinds) {
      if (slots->kind() != req.matches[1].str()) continue;
      const auto [status, text] = slots->Apply(std::atoi(req.matches[2].str().c_str()), action, rate);
      res.status = status;
      res.set_content(text, "text/plain");
      return;
    }
    res.status = 404;
    res.set_content("no such kind of child: " + req.matches[1].str() + " (prefill, decode, router)", "text/plain");
  });
  *port = server->bind_to_any_port("127.0.0.1");  // never reachable from another host
  if (*port <= 0) return nullptr;
  return server;
}

std::string Numbered(const std::string& base, int i, const char* space = " ") {
  return i == 0 ? base : base + space + std::to_string(i);
}

// Waits for SIGTERM/SIGINT while restarting children that exit by themselves
// (supervisor.h). Returns the launcher's exit code: 0 on a signal (also one
// that comes during a backoff or while a restarted child loads), 1 when a
// child's restart budget is spent.
int Supervise(Supervisor& supervisor, const sigset_t& signals, const std::vector<ChildSlots*>& kinds) {
  // Waits out a backoff, ending early on a signal: false when one came.
  auto wait = [&](std::chrono::milliseconds ms) {
    const timespec ts{time_t(ms.count() / 1000), long(ms.count() % 1000) * 1'000'000};
    return sigtimedwait(&signals, nullptr, &ts) < 0;
  };
  // Restarts one child: 0 when it is back, else the launcher's exit code. A
  // start that fails counts as another exit, against the same budget.
  auto restart = [&](const std::string& name, std::string how, bool drained, const std::function<int()>& start) {
    for (;;) {
      const auto backoff = drained ? supervisor.Drained(name) : supervisor.Down(name, how);
      drained = false;  // a start that fails is a failure
      if (backoff.count() < 0) return 1;
      if (!wait(backoff)) return 0;
      const int port = start();
      if (port == Child::kSignalled) return 0;
      if (port > 0) break;
      how = "did not start again";
    }
    supervisor.Started(name);
    TLOG_INFO("tandem serve --disagg: the %s is back\n", name.c_str());
    return -1;
  };
  const timespec tick{0, 100'000'000};  // how often children are looked at
  while (sigtimedwait(&signals, nullptr, &tick) < 0) {
    for (ChildSlots* slots : kinds) {
      for (const ChildSlots::Exit& e : slots->Reap()) {
        if (const int code = restart(slots->Name(e.child), e.how, e.drained,
                                     [&, i = e.child] { return slots->Start(i, slots->port(i), {}, &signals); });
            code >= 0) {
          return code;
        }
      }
    }
  }
  return 0;
}

}  // namespace

std::string PrefillEngineName(int i) { return i == 0 ? "prefill" : "prefill" + std::to_string(i); }

int RunDisagg(const DisaggLaunch& given) {
  DisaggLaunch l = given;
  // A private folder for the supervisor's state and, without a key given, a
  // fresh random cluster key (transfer/cluster_key.h) the engines prove to
  // each other; removed at exit.
  struct PrivateFolder {
    std::string dir;
    ~PrivateFolder() {
      if (!dir.empty()) std::filesystem::remove_all(dir);
    }
  } folder;
  char dir[] = "/tmp/tandem-disagg-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return TLOG_ERROR("tandem serve --disagg: cannot create a private folder\n"), 1;
  folder.dir = dir;
  if (l.cluster_key_file.empty()) {
    l.cluster_key_file = folder.dir + "/cluster.key";
    if (Status st = transfer::WriteRandomClusterKey(l.cluster_key_file); !st.ok()) {
      return TLOG_ERROR("tandem serve --disagg: %s\n", st.message().c_str()), 1;
    }
  }
  for (auto* side : {&l.prefill_args, &l.decode_args}) side->insert(side->end(), {"--cluster-key-file", l.cluster_key_file});
  Supervisor supervisor(folder.dir + "/supervisor.json", l.restart_budget);
  const sigset_t set = BlockStopSignals();
  // Only the router listens where clients reach it; the engines and the
  // decode servers listen on l.children_host (loopback unless told).
  const std::string loop = l.children_host;
  ChildSlots prefill(
      "prefill", [](int i) { return Numbered("prefill engine", i); },
      [&](int i, int port, const std::vector<std::string>& extra) {
        const std::vector<std::string> own =
            size_t(i) < l.prefill_engine_args.size() ? l.prefill_engine_args[size_t(i)] : std::vector<std::string>{};
        auto args = Concat(Concat(Concat(Concat(Concat({"prefill", "--host", loop, "--port", std::to_string(port)},
                                                       l.model_args),
                                                l.attention_args),
                                         l.prefill_args),
                                  own),
                           extra);
        return std::make_shared<Child>(PrefillEngineName(i), std::move(args),
                                       "handoffs at " + std::string(transfer::TransportFamily(l.transport)) + "://" + loop + ":");
      });
  std::string addresses;
  // The decode servers and the router restart on the ports they had, where
  // the router and the clients look for them.
  ChildSlots decode(
      "decode", [](int i) { return Numbered("decode server", i); },
      [&](int i, int port, const std::vector<std::string>& extra) {
        const std::vector<std::string> own =
            size_t(i) < l.decode_server_args.size() ? l.decode_server_args[size_t(i)] : std::vector<std::string>{};
        return std::make_shared<Child>(
            Numbered("decode", i, ""),
            Concat(Concat(Concat(Concat(Concat({"serve", "--host", loop, "--port", std::to_string(port), "--prefill",
                                                addresses},
                                               l.model_args),
                                        l.attention_args),
                                 l.decode_args),
                          own),
                   extra),
            "http://" + loop + ":");
      });
  std::string decode_list;
  ChildSlots router(
      "router", [](int) { return std::string("router"); },
      [&](int, int port, const std::vector<std::string>& extra) {
        return std::make_shared<Child>(
            "router",
            Concat(Concat({"router", "--host", l.host, "--port", std::to_string(port), "--decode", decode_list,
                           "--supervisor-state", supervisor.state_path()},
                          l.router_args),
                   extra),
            "http://" + l.host + ":");
      });
  // A signal during start-up ends it: what started is stopped on the way out.
  struct StopAll {
    std::vector<ChildSlots*> kinds;
    ~StopAll() {
      for (ChildSlots* k : kinds) k->StopAll();
    }
  } stop_all{{&prefill, &router, &decode}};  // prefill first: a restart under way ends its wait at once
  auto signalled = [] { return TLOG_INFO("tandem serve --disagg: stopped by a signal while starting\n"), 0; };
  for (int i = 0; i < l.prefill_engines; ++i) {
    const int port = prefill.Start(i, 0, {}, &set);
    if (port == Child::kSignalled) return signalled();
    if (port <= 0) return TLOG_ERROR("tandem serve --disagg: prefill engine %d did not start\n", i), 1;
    supervisor.Started(prefill.Name(i));
    addresses += (addresses.empty() ? "" : ",") + loop + ":" + std::to_string(port);
  }
  for (int i = 0; i < l.decode_servers; ++i) {
    const int port = decode.Start(i, 0, {}, &set);
    if (port == Child::kSignalled) return signalled();
    if (port <= 0) return TLOG_ERROR("tandem serve --disagg: decode server %d did not start\n", i), 1;
    supervisor.Started(decode.Name(i));
    decode_list += (decode_list.empty() ? "" : ",") + loop + ":" + std::to_string(port);
  }
  const int router_port = router.Start(0, l.port, {}, &set);
  if (router_port == Child::kSignalled) return signalled();
  if (router_port <= 0) return TLOG_ERROR("tandem serve --disagg: the router did not start\n"), 1;
  supervisor.Started("router");
  std::unique_ptr<httplib::Server> control;
  std::thread control_thread;
  if (l.fault_control) {
    int control_port = 0;
    const std::string key_file = folder.dir + "/fault-control.key";
    std::string key;
    if (Status st = transfer::WriteRandomClusterKey(key_file); !st.ok()) {
      return TLOG_ERROR("tandem serve --disagg: %s\n", st.message().c_str()), 1;
    }
    if (std::ifstream in(key_file); !(in >> key)) {
      return TLOG_ERROR("tandem serve --disagg: cannot read back %s\n", key_file.c_str()), 1;
    }
    control = StartFaultControl({&prefill, &decode, &router}, key, &control_port);
    if (!control || !StartListening(*control, &control_thread, std::chrono::seconds(10))) {
      return TLOG_ERROR("tandem serve --disagg: the fault-control listener did not start\n"), 1;
    }
    TLOG_WARN("WARNING: --debug-fault-control: fault control at http://127.0.0.1:%d (key in %s) kills, restarts, "
              "drains and stops prefill engines, decode servers and the router on request (tests and soaks only)\n",
              control_port, key_file.c_str());
  }
  TLOG_INFO("tandem serve --disagg: router at http://%s:%d (decode %s, prefill ucx %s)\n", l.host.c_str(),
            router_port, decode_list.c_str(), addresses.c_str());
  const int code = Supervise(supervisor, set, {&prefill, &decode, &router});
  TLOG_INFO("tandem serve --disagg: stopping router, decode, prefill\n");
  if (control) {
    control->stop();
    control_thread.join();
  }
  return code;
}

}  // namespace tandem::node
