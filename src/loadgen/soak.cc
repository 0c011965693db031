#include "loadgen/soak.h"

#include <fcntl.h>
#include <httplib.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "common/env.h"
#include "common/splitmix.h"

namespace tandem {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* FaultName(Fault::Kind kind) {
  switch (kind) {
    case Fault::Kind::kKill: return "kill";
    case Fault::Kind::kWedge: return "wedge";
    case Fault::Kind::kAbortStorm: return "abort-storm";
    case Fault::Kind::kBitFlips: return "bit-flips";
    case Fault::Kind::kDrain: return "drain";
    case Fault::Kind::kRouterDrain: return "router-drain";
    case Fault::Kind::kDecodeWedge: return "decode-wedge";
    case Fault::Kind::kDecodeKill: return "decode-kill";
    case Fault::Kind::kDecodeDrain: return "decode-drain";
    case Fault::Kind::kRouterKill: return "router-kill";
  }
  return "?";
}

std::string DescribeFault(const Fault& f) {
  char text[160];
  switch (f.kind) {
    case Fault::Kind::kKill:
      std::snprintf(text, sizeof(text), "kill -9 prefill %d at %.0f s, restarted %.0f s later", f.target, f.at_s, f.for_s);
      break;
    case Fault::Kind::kWedge:
      std::snprintf(text, sizeof(text), "wedge (SIGSTOP) prefill %d at %.0f s for %.0f s", f.target, f.at_s, f.for_s);
      break;
    case Fault::Kind::kDecodeWedge:
      std::snprintf(text, sizeof(text), "wedge (SIGSTOP) decode server %d at %.0f s for %.0f s", f.target, f.at_s,
                    f.for_s);
      break;
    case Fault::Kind::kAbortStorm:
      std::snprintf(text, sizeof(text), "abort storm of %d hung-up requests at %.0f s", f.target, f.at_s);
      break;
    case Fault::Kind::kBitFlips:
      std::snprintf(text, sizeof(text), "bit flips in %.3g of prefill %d's page writes at %.0f s for %.0f s", f.rate,
                    f.target, f.at_s, f.for_s);
      break;
    case Fault::Kind::kDecodeKill:
      std::snprintf(text, sizeof(text), "kill -9 decode server %d at %.0f s, restarted %.0f s later", f.target, f.at_s,
                    f.for_s);
      break;
    case Fault::Kind::kDecodeDrain:
      std::snprintf(text, sizeof(text), "drain (SIGTERM, restarted by the launcher) decode server %d at %.0f s, %.0f s window",
                    f.target, f.at_s, f.for_s);
      break;
    case Fault::Kind::kRouterKill:
      std::snprintf(text, sizeof(text), "kill -9 the router at %.0f s, restarted %.0f s later", f.at_s, f.for_s);
      break;
    case Fault::Kind::kDrain:
      std::snprintf(text, sizeof(text), "drain (SIGTERM, restarted by the launcher) prefill %d at %.0f s, %.0f s window",
                    f.target, f.at_s, f.for_s);
      break;
    case Fault::Kind::kRouterDrain:
      std::snprintf(text, sizeof(text), "drain (SIGTERM, restarted by the launcher) the router at %.0f s, %.0f s window",
                    f.at_s, f.for_s);
      break;
  }
  return text;
}

namespace {

constexpr int kMaxStormRequests = 1024;  // one client thread each

StatusOr<Fault> ParseOneFault(const std::string& item) {
  const std::string form = " (KIND:TARGET@AT[+FOR][/RATE], e.g. kill:0@30+5)";
  const size_t colon = item.find(':'), at = item.find('@');
  if (colon == std::string::npos || at == std::string::npos || at < colon) {
    return InvalidArgument("fault '" + item + "' is not of the form" + form);
  }
  Fault f;
  const std::string kind = item.substr(0, colon);
  if (kind == "kill") f.kind = Fault::Kind::kKill;
  else if (kind == "wedge") f.kind = Fault::Kind::kWedge;
  else if (kind == "abort-storm") f.kind = Fault::Kind::kAbortStorm;
  else if (kind == "bit-flips") f.kind = Fault::Kind::kBitFlips;
  else if (kind == "decode-kill") f.kind = Fault::Kind::kDecodeKill;
  else if (kind == "decode-drain") f.kind = Fault::Kind::kDecodeDrain;
  else if (kind == "router-kill") f.kind = Fault::Kind::kRouterKill;
  else if (kind == "drain") f.kind = Fault::Kind::kDrain;
  else if (kind == "router-drain") f.kind = Fault::Kind::kRouterDrain;
  else if (kind == "decode-wedge") f.kind = Fault::Kind::kDecodeWedge;
  else return InvalidArgument("unknown fault '" + kind + "' (kill, wedge, abort-storm, bit-flips, drain, decode-kill, "
                              "decode-drain, decode-wedge, router-kill, router-drain)");
  char* end = nullptr;
  const std::string target = item.substr(colon + 1, at - colon - 1);
  const long t = std::strtol(target.c_str(), &end, 10);
  if (target.empty() || *end != '\0' || t < 0 || t > 100000) return InvalidArgument("fault '" + item + "': bad target" + form);
  f.target = int(t);
  const char* p = item.c_str() + at + 1;
  f.at_s = std::strtod(p, &end);
  if (end == p || f.at_s < 0) return InvalidArgument("fault '" + item + "': bad time" + form);
  p = end;
  if (*p == '+') {
    f.for_s = std::strtod(p + 1, &end);
    if (end == p + 1 || f.for_s < 0) return InvalidArgument("fault '" + item + "': bad duration" + form);
    p = end;
  }
  if (*p == '/') {
    f.rate = std::strtod(p + 1, &end);
    if (end == p + 1 || !(f.rate > 0 && f.rate <= 1)) return InvalidArgument("fault '" + item + "': the rate must be in (0, 1]");
    p = end;
  }
  if (*p != '\0') return InvalidArgument("fault '" + item + "': unexpected '" + std::string(p) + "'" + form);
  if (f.kind == Fault::Kind::kAbortStorm && (f.target < 1 || f.target > kMaxStormRequests)) {
    return InvalidArgument("an abort storm takes 1 to " + std::to_string(kMaxStormRequests) + " requests");
  }
  if (f.kind != Fault::Kind::kAbortStorm && f.for_s <= 0) {
    return InvalidArgument("fault '" + item + "' needs a duration (+SECONDS)");
  }
  return f;
}

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Env::Default().Now() - t0).count(); }

// Sleeps until t0 + at_s; false if `stop` was set first.
bool SleepUntil(Clock::time_point t0, double at_s, const std::atomic<bool>& stop) {
  const auto until = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at_s));
  while (Env::Default().Now() < until) {
    if (stop.load()) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(until - Env::Default().Now(), std::chrono::milliseconds(100)));
  }
  return !stop.load();
}

// Sleeps `s` seconds, or until `stop` is set.
void SleepFor(double s, const std::atomic<bool>& stop) { SleepUntil(Env::Default().Now(), s, stop); }

// connect() within 2 s (a full accept queue must not hold the fault runner).
bool ConnectWithin(int fd, const sockaddr* addr, socklen_t len) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = connect(fd, addr, len);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t err_len = sizeof(err);
    rc = poll(&p, 1, 2000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) == 0 && err == 0 ? 0 : -1;
  }
  fcntl(fd, F_SETFL, flags);
  return rc == 0;
}

// A client that leaves: sends a streaming request and closes the socket
// after `after_ms`, without reading a byte of the answer. Every step is
// bounded (connect 2 s, each send 2 s).
void HangUpAfter(const std::string& host, int port, const std::string& body, int after_ms) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr) return;
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  const timeval send_timeout{2, 0};
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof(send_timeout));
  if (fd >= 0 && ConnectWithin(fd, res->ai_addr, res->ai_addrlen)) {
    const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: " + host +
                                "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                                "\r\n\r\n" + body;
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += size_t(n);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
}

class FaultRunner {
 public:
  FaultRunner(const std::string& host, int port, const std::string& model, const AgenticShape& shape,
              const SoakOptions& o)
      : host_(host), port_(port), model_(model), shape_(shape), o_(o) {}

  // Runs every fault in order; a fault under way when `stop` is set still
  // hands the system back (restart, continue) before this returns.
  void Run(Clock::time_point t0, const std::atomic<bool>& stop, std::vector<FaultEvent>* events) {
    for (size_t i = 0; i < o_.faults.size(); ++i) {
      const Fault& f = o_.faults[i];
      if (!SleepUntil(t0, f.at_s, stop)) return;
      FaultEvent e;
      e.fault = f;
      e.start_s = Since(t0);
      e.error = Apply(f, uint64_t(i), stop);
      e.end_s = Since(t0);
      std::fprintf(stderr, "  soak %.0f s: %s%s%s\n", e.start_s, DescribeFault(f).c_str(),
                   e.error.empty() ? "" : ": FAILED: ", e.error.c_str());
      const double next = i + 1 < o_.faults.size() ? o_.faults[i + 1].at_s : o_.duration_s;
      e.healthy_s = WaitHealthy(t0, std::max(next, e.end_s + 5), stop);
      events->push_back(std::move(e));
    }
  }

 private:
  std::string Control(int target, const std::string& action, double rate = 0, const std::string& child = "prefill") {
    if (o_.control_port <= 0) return "no --fault-control address (serve --disagg --debug-fault-control prints it)";
    httplib::Client cli(o_.control_host, o_.control_port);
    cli.set_connection_timeout(std::chrono::seconds(5));
    cli.set_read_timeout(std::chrono::seconds(180));  // a restart waits for the engine to come up
    Json body = {{"action", action}};
    if (rate > 0) body["bit_flip_rate"] = rate;
    const httplib::Headers auth = {{"Authorization", "Bearer " + o_.control_key}};
    auto res = cli.Post("/debug/" + child + "/" + std::to_string(target), auth, body.dump(), "application/json");
    if (!res) return "fault control did not answer (" + action + ")";
    if (res->status != 200) return action + ": " + res->body;
    return "";
  }

  // A fault's duration ends early when the soak does: the system is always
  // handed back (restarted, continued) before Run returns.
  std::string Apply(const Fault& f, uint64_t index, const std::atomic<bool>& stop) {
    std::string error;
    auto note = [&error](std::string e) {
      if (!e.empty()) error += (error.empty() ? "" : "; ") + e;
    };
    switch (f.kind) {
      case Fault::Kind::kKill:
        note(Control(f.target, "kill"));
        SleepFor(f.for_s, stop);
        note(Control(f.target, "restart"));
        break;
      case Fault::Kind::kWedge:
      case Fault::Kind::kDecodeWedge: {
        const std::string child = f.kind == Fault::Kind::kWedge ? "prefill" : "decode";
        note(Control(f.target, "stop", 0, child));
        SleepFor(f.for_s, stop);
        note(Control(f.target, "cont", 0, child));
        break;
      }
      case Fault::Kind::kBitFlips:
        note(Control(f.target, "restart", f.rate));
        SleepFor(f.for_s, stop);
        note(Control(f.target, "restart"));
        break;
      case Fault::Kind::kAbortStorm: AbortStorm(f.target, index); break;
      case Fault::Kind::kDecodeKill:
      case Fault::Kind::kRouterKill: {
        const std::string child = f.kind == Fault::Kind::kDecodeKill ? "decode" : "router";
        note(Control(f.target, "kill", 0, child));
        SleepFor(f.for_s, stop);
        note(Control(f.target, "restart", 0, child));
        break;
      }
      case Fault::Kind::kDrain:
      case Fault::Kind::kDecodeDrain:
      case Fault::Kind::kRouterDrain:
        note(Control(f.target, "drain", 0, f.kind == Fault::Kind::kDrain ? "prefill" : f.kind == Fault::Kind::kRouterDrain ? "router" : "decode"));
        SleepFor(f.for_s, stop);
        break;
    }
    return error;
  }

  // `n` clients send fresh prompts (nothing cached) and hang up 1..300 ms
  // later: while queued, prefilling, in their handoff or decoding.
  void AbortStorm(int n, uint64_t index) {
    std::vector<std::thread> clients;
    for (int c = 0; c < n; ++c) {
      const uint64_t seed = SplitMix64(shape_.seed ^ (0xab0b7ull << 20) ^ (index << 12) ^ uint64_t(c));
      const Json body = {{"model", model_},
                         {"stream", true},
                         {"max_tokens", shape_.gen_tokens},
                         {"temperature", 0},
                         {"messages", {{{"role", "user"},
                                        {"content", SyntheticText(seed, shape_.initial_tokens, shape_.tokens_per_word)}}}}};
      clients.emplace_back([this, text = body.dump(), after = int(1 + seed % 300)] {
        HangUpAfter(host_, port_, text, after);
      });
    }
    for (auto& t : clients) t.join();
  }

  // Seconds since t0 when /health answered 200 again, polling until `until_s`.
  double WaitHealthy(Clock::time_point t0, double until_s, const std::atomic<bool>& stop) {
    while (Since(t0) < until_s && !stop.load()) {
      httplib::Client cli(host_, port_);
      cli.set_connection_timeout(std::chrono::seconds(1));
      cli.set_read_timeout(std::chrono::seconds(2));
      auto res = cli.Get("/health");
      if (res && res->status == 200) return Since(t0);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return -1;
  }

  const std::string host_;
  const int port_;
  const std::string model_;
  const AgenticShape shape_;
  const SoakOptions& o_;
};

}  // namespace

StatusOr<std::vector<Fault>> ParseFaults(const std::string& text) {
  std::vector<Fault> faults;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) {
      TANDEM_ASSIGN_OR_RETURN(Fault f, ParseOneFault(item));
      faults.push_back(f);
    }
    pos = comma + 1;
  }
  std::stable_sort(faults.begin(), faults.end(), [](const Fault& a, const Fault& b) { return a.at_s < b.at_s; });
  return faults;
}

std::vector<Fault> RepeatFaults(const std::vector<Fault>& faults, double period_s, double duration_s) {
  std::vector<Fault> out;
  for (int k = 0;; ++k) {
    bool any = false;
    for (Fault f : faults) {
      f.at_s += period_s * k;
      if (f.at_s >= duration_s) continue;
      out.push_back(f);
      any = true;
    }
    if (!any || period_s <= 0) break;
  }
  std::stable_sort(out.begin(), out.end(), [](const Fault& a, const Fault& b) { return a.at_s < b.at_s; });
  return out;
}

Status RunSoak(const std::string& host, int port, const std::string& model, const AgenticShape& shape,
               const SoakOptions& o, PointProgress* progress, std::vector<RoundRecord>* rounds,
               std::vector<FaultEvent>* events) {
  for (const Fault& f : o.faults) {
    if (f.kind != Fault::Kind::kAbortStorm && o.control_port <= 0) {
      return InvalidArgument("the fault '" + DescribeFault(f) +
                             "' needs --fault-control (start the servers with serve --disagg --debug-fault-control)");
    }
    if (f.kind != Fault::Kind::kAbortStorm && o.control_key.empty()) {
      return InvalidArgument("the fault '" + DescribeFault(f) +
                             "' needs --fault-control-key-file (the file the launcher names beside its fault control)");
    }
  }
  std::atomic<bool> stop_sessions{false}, stop_faults{false};
  std::atomic<int> next_session{0};
  std::vector<std::vector<RoundRecord>> per_worker(static_cast<size_t>(o.concurrency));
  const auto t0 = Env::Default().Now();
  std::vector<std::thread> workers;
  for (int w = 0; w < o.concurrency; ++w) {
    workers.emplace_back([&, w] {
      while (!stop_sessions.load()) {
        RunSession(host, port, model, shape, 0, o.concurrency, next_session++, t0, progress,
                   &per_worker[size_t(w)], &stop_sessions);
      }
    });
  }
  FaultRunner runner(host, port, model, shape, o);
  std::thread faults([&] { runner.Run(t0, stop_faults, events); });
  double last_note = 0;
  while (Since(t0) < o.duration_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (Since(t0) - last_note >= 30) {
      last_note = Since(t0);
      std::fprintf(stderr, "  soak %.0f/%.0f s: %lld rounds, %lld failed, %d sessions started\n", last_note,
                   o.duration_s, (long long)progress->rounds_done.load(), (long long)progress->failures.load(),
                   next_session.load());
    }
  }
  stop_sessions = true;
  for (auto& t : workers) t.join();
  stop_faults = true;
  faults.join();
  for (auto& v : per_worker) {
    for (auto& r : v) rounds->push_back(std::move(r));
  }
  std::sort(rounds->begin(), rounds->end(), [](const RoundRecord& a, const RoundRecord& b) {
    return a.session != b.session ? a.session < b.session : a.round < b.round;
  });
  return Status::Ok();
}

std::vector<SoakWindow> SoakWindows(const std::vector<FaultEvent>& events, const std::vector<RoundRecord>& rounds,
                                    double duration_s, double settle_s) {
  std::vector<SoakWindow> windows;
  double quiet_from = 0;
  auto add_quiet = [&](double to) {
    if (to <= quiet_from) return;
    SoakWindow q;
    q.label = "quiet";
    q.from_s = quiet_from;
    q.to_s = to;
    windows.push_back(q);
  };
  for (const FaultEvent& e : events) {
    add_quiet(e.start_s);
    SoakWindow w;
    w.fault = true;
    w.label = DescribeFault(e.fault) + (e.error.empty() ? "" : " (FAILED: " + e.error + ")");
    const Fault::Kind k = e.fault.kind;
    const char* who = k == Fault::Kind::kAbortStorm                                      ? " "
                      : k == Fault::Kind::kDecodeKill || k == Fault::Kind::kDecodeDrain ||
                              k == Fault::Kind::kDecodeWedge                                ? " d"
                      : k == Fault::Kind::kRouterKill || k == Fault::Kind::kRouterDrain  ? " r"
                                                                                         : " p";
    w.short_label = std::string(FaultName(k)) + who + std::to_string(e.fault.target);
    w.from_s = e.start_s;
    w.fault_end_s = e.end_s;
    w.to_s = e.end_s + settle_s;
    w.healthy_after_s = e.healthy_s < 0 ? -1 : std::max(0.0, e.healthy_s - e.end_s);
    windows.push_back(w);
    quiet_from = std::max(quiet_from, w.to_s);
  }
  double last_end = duration_s;
  for (const RoundRecord& r : rounds) last_end = std::max(last_end, r.start_s + std::max(r.e2e_s, r.ttft_s));
  add_quiet(last_end + 1e-9);
  for (const RoundRecord& r : rounds) {
    const double begin = r.start_s, end = r.start_s + std::max(r.e2e_s, r.ttft_s);
    SoakWindow* home = nullptr;
    for (SoakWindow& w : windows) {
      if (w.fault && begin <= w.to_s && end >= w.from_s) {
        home = &w;
        break;
      }
    }
    for (size_t i = 0; home == nullptr && i < windows.size(); ++i) {
      if (!windows[i].fault && begin >= windows[i].from_s && begin < windows[i].to_s) home = &windows[i];
    }
    if (home == nullptr) home = &windows.back();
    ++home->outcomes[r.outcome];
  }
  // Recovery: the first round that started after the fault was handed back
  // and was answered (and, once verified, judged ok).
  size_t e = 0;
  for (SoakWindow& w : windows) {
    if (!w.fault) continue;
    const double fault_end = events[e++].end_s;
    double first = -1;
    for (const RoundRecord& r : rounds) {
      if (r.start_s < fault_end || (r.outcome != kOk && r.outcome != kUnverified && r.outcome != kDrift)) continue;
      const double done = r.start_s + r.e2e_s;
      if (first < 0 || done < first) first = done;
    }
    w.recovery_s = first < 0 ? -1 : first - fault_end;
  }
  return windows;
}

}  // namespace tandem
