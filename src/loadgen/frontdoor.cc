#include "loadgen/frontdoor.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "common/env.h"
#include "loadgen/stream_client.h"
#include "server/http_client.h"

namespace tandem {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

namespace {

double MsSince(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Env::Default().Now() - t0).count(); }

// A blocking TCP connection to host:port; -1 on failure.
int Connect(const std::string& host, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

std::string Metrics(const std::string& host, int port) {
  httplib::Client cli(host, port);
  cli.set_connection_timeout(2, 0);
  cli.set_read_timeout(5, 0);
  auto res = cli.Get("/metrics");
  return res && res->status == 200 ? res->body : "";
}

// The sum of the samples of `name` whose labels contain `labels` ("" any);
// `name` ending in '*' matches any metric that ends with the rest.
double Metric(const std::string& text, const std::string& name, const std::string& labels = "") {
  std::istringstream in(text);
  std::string line;
  double sum = 0;
  const bool suffix = !name.empty() && name.back() == '*';
  const std::string want = suffix ? name.substr(0, name.size() - 1) : name;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t end = line.find_first_of("{ ");
    if (end == std::string::npos) continue;
    const std::string metric = line.substr(0, end);
    const bool match = suffix ? metric.size() >= want.size() && metric.compare(metric.size() - want.size(), want.size(), want) == 0
                              : metric == want;
    if (!match) continue;
    if (!labels.empty() && line.find(labels) == std::string::npos) continue;
    sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return sum;
}

double Rss(const std::string& host, int port) { return Metric(Metrics(host, port), "process_resident_memory_bytes*"); }

std::string AuthHeader(const FrontDoorOptions& o) {
  return o.api_key.empty() ? "" : "Authorization: Bearer " + o.api_key + "\r\n";
}

std::string ModelId(const FrontDoorOptions& o) {
  httplib::Client cli(o.host, o.port);
  cli.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
  auto res = cli.Get("/v1/models", h);
  if (!res || res->status != 200) return "";
  const Json j = Json::parse(res->body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty()) return "";
  return j["data"][0].value("id", "");
}

std::string RawPost(const FrontDoorOptions& o, const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: " + o.host + "\r\nContent-Type: application/json\r\n" + AuthHeader(o) +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// --- idle connections ---
void Idle(const FrontDoorOptions& o, FrontDoorReport& r) {
  const double before = Rss(o.host, o.port);
  std::vector<int> fds;
  for (int i = 0; i < o.idle; ++i) {
    const int fd = Connect(o.host, o.port);
    if (fd < 0) break;
    fds.push_back(fd);
  }
  // Until the server has accepted them all (bounded).
  double open = 0;
  for (auto until = Env::Default().Now() + std::chrono::seconds(10); Env::Default().Now() < until;) {
    open = Metric(Metrics(o.host, o.port), "http_open_connections*");
    if (open >= double(fds.size())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double after = Rss(o.host, o.port);
  r.idle_held = int64_t(open);
  if (!fds.empty()) r.idle_bytes_per_connection = (after - before) / double(fds.size());
  for (int fd : fds) ::close(fd);
}

// --- concurrent streams ---
struct StreamResult {
  std::string text, finish;
  bool ok = false;
  double ttfb_ms = -1;
};

// Runs the bodies as concurrent streaming requests.
std::vector<StreamResult> RunStreams(HttpClient& client, const FrontDoorOptions& o, const std::vector<std::string>& bodies,
                                     std::chrono::seconds timeout) {
  // Shared with the callbacks, which may outlive a wait that gave up.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    size_t done = 0;
    std::vector<StreamResult> results;
  };
  auto st = std::make_shared<State>();
  st->results.resize(bodies.size());
  std::vector<std::shared_ptr<HttpCall>> calls;
  for (size_t i = 0; i < bodies.size(); ++i) {
    HttpClientRequest req;
    req.host = o.host;
    req.port = o.port;
    req.target = "/v1/completions";
    req.headers = {{"Content-Type", "application/json"}};
    if (!o.api_key.empty()) req.headers.emplace_back("Authorization", "Bearer " + o.api_key);
    req.body = bodies[i];
    req.timeout = timeout;
    const auto t0 = Env::Default().Now();
    auto status = std::make_shared<int>(0);
    auto raw = std::make_shared<std::string>();
    auto ttfb = std::make_shared<double>(-1);
    HttpClientEvents ev;
    ev.on_head = [status](int s, const HttpHeaders&) { *status = s; };
    ev.on_data = [t0, raw, ttfb](std::string data) {
      if (*ttfb < 0) *ttfb = MsSince(t0);
      *raw += data;
      return true;
    };
    ev.on_done = [st, i, status, raw, ttfb](const std::string& error) {
      StreamResult s;
      s.ttfb_ms = *ttfb;
      bool saw_done = false;
      std::istringstream in(*raw);
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("data: ", 0) != 0) continue;
        if (line == "data: [DONE]") {
          saw_done = true;
          continue;
        }
        const Json j = Json::parse(line.substr(6), nullptr, false);
        if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
        const Json& c = j["choices"][0];
        if (c.contains("text") && c["text"].is_string()) s.text += c["text"].get<std::string>();
        if (c.contains("finish_reason") && c["finish_reason"].is_string()) s.finish = c["finish_reason"];
      }
      s.ok = error.empty() && *status == 200 && saw_done && !s.finish.empty();
      std::lock_guard<std::mutex> lock(st->mu);
      st->results[i] = std::move(s);
      ++st->done;
      st->cv.notify_all();
    };
    calls.push_back(client.Start(std::move(req), std::move(ev)));
  }
  std::unique_lock<std::mutex> lock(st->mu);
  if (!st->cv.wait_for(lock, timeout + std::chrono::seconds(5), [&] { return st->done == bodies.size(); })) {
    lock.unlock();
    for (auto& c : calls) c->Cancel();
    lock.lock();
    st->cv.wait_for(lock, std::chrono::seconds(10), [&] { return st->done == bodies.size(); });
  }
  return st->results;
}

std::string StreamBody(const std::string& model, int prompt, int max_tokens) {
  Json b = {{"prompt", "Once upon a time, story " + std::to_string(prompt) + " began with"},
            {"max_tokens", max_tokens}, {"temperature", 0.8}, {"seed", 1000 + prompt}, {"stream", true},
            {"ignore_eos", true}};
  if (!model.empty()) b["model"] = model;
  return b.dump();
}

void Streams(const FrontDoorOptions& o, const std::string& model, FrontDoorReport& r) {
  HttpClient client;
  std::vector<std::string> alone_bodies;
  for (int p = 0; p < o.prompts; ++p) alone_bodies.push_back(StreamBody(model, p, o.max_tokens));
  // Each prompt alone, one at a time: the reference.
  std::vector<StreamResult> alone;
  for (const std::string& b : alone_bodies) alone.push_back(RunStreams(client, o, {b}, o.phase_timeout)[0]);
  std::vector<std::string> bodies;
  for (int i = 0; i < o.streams; ++i) bodies.push_back(alone_bodies[size_t(i % o.prompts)]);

  std::atomic<bool> stop{false};
  std::vector<double> health;
  int64_t health_failed = 0;
  std::thread prober([&] {
    while (!stop) {
      const auto t0 = Env::Default().Now();
      httplib::Client cli(o.host, o.port);
      cli.set_connection_timeout(o.health_timeout_s, 0);
      cli.set_read_timeout(o.health_timeout_s, 0);
      auto res = cli.Get("/health");
      health.push_back(MsSince(t0));
      if (!res || res->status != 200) ++health_failed;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const auto t0 = Env::Default().Now();
  std::vector<StreamResult> all = RunStreams(client, o, bodies, o.phase_timeout);
  r.streams_wall_s = MsSince(t0) / 1000;
  stop = true;
  prober.join();
  std::vector<double> ttfb;
  for (size_t i = 0; i < all.size(); ++i) {
    const StreamResult& ref = alone[i % alone.size()];
    if (!all[i].ok) {
      ++r.streams_failed;
      continue;
    }
    ++r.streams_ok;
    if (ref.ok && all[i].text == ref.text && all[i].finish == ref.finish) ++r.streams_equal;
    ttfb.push_back(all[i].ttfb_ms);
  }
  r.ttfb_p50_ms = Percentile(ttfb, 50);
  r.ttfb_p99_ms = Percentile(ttfb, 99);
  r.health_probes = int64_t(health.size());
  r.health_failed = health_failed;
  r.health_p99_ms = Percentile(health, 99);
  r.health_max_ms = health.empty() ? 0 : *std::max_element(health.begin(), health.end());
}

// --- slowloris ---
void Slowloris(const FrontDoorOptions& o, const std::string& model, FrontDoorReport& r) {
  struct Slow {
    int fd;
    bool open = true;
    double closed_after_s = 0;
    std::string answer;
  };
  std::vector<Slow> slow;
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: " + o.host +
                           "\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n" + AuthHeader(o) + "\r\n{";
  const auto t0 = Env::Default().Now();
  for (int i = 0; i < o.slowloris; ++i) {
    const int fd = Connect(o.host, o.port);
    if (fd < 0 || !SendAll(fd, head)) {
      if (fd >= 0) ::close(fd);
      continue;
    }
    ::fcntl(fd, F_SETFL, O_NONBLOCK);
    slow.push_back(Slow{fd, true, 0, ""});
  }
  // A real request while they dribble.
  std::thread real([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    Json b = {{"prompt", "A real request"}, {"max_tokens", 4}, {"temperature", 0}};
    if (!model.empty()) b["model"] = model;
    httplib::Client cli(o.host, o.port);
    cli.set_read_timeout(30, 0);
    httplib::Headers h;
    if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
    const auto t = Env::Default().Now();
    auto res = cli.Post("/v1/completions", h, b.dump(), "application/json");
    r.request_during_slowloris_ms = MsSince(t);
    r.request_during_slowloris_status = res ? res->status : 0;
  });
  const auto until = Env::Default().Now() + o.phase_timeout;
  size_t open = slow.size();
  while (open > 0 && Env::Default().Now() < until) {
    for (Slow& s : slow) {
      if (!s.open) continue;
      char buf[4096];
      const ssize_t n = ::recv(s.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) s.answer.append(buf, size_t(n));
      const bool closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                          ::send(s.fd, " ", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
      if (closed || n > 0) {
        s.open = false;
        s.closed_after_s = MsSince(t0) / 1000;
        --open;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  real.join();
  r.slow_open_at_end = int64_t(open);
  r.slow_closed_after_s_min = 1e30;
  for (Slow& s : slow) {
    if (!s.open) {
      ++r.slow_closed;
      if (s.answer.rfind("HTTP/1.1 408", 0) == 0) ++r.slow_got_408;
      r.slow_closed_after_s_min = std::min(r.slow_closed_after_s_min, s.closed_after_s);
      r.slow_closed_after_s_max = std::max(r.slow_closed_after_s_max, s.closed_after_s);
    }
    ::close(s.fd);
  }
  if (r.slow_closed == 0) r.slow_closed_after_s_min = 0;
}

// --- a huge chunked body ---
void BigBody(const FrontDoorOptions& o, FrontDoorReport& r) {
  const double before = Rss(o.host, o.port);
  const int fd = Connect(o.host, o.port);
  if (fd < 0) {
    r.error = "cannot connect for the big body";
    return;
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  std::string answer;
  bool ok = SendAll(fd, "POST /v1/completions HTTP/1.1\r\nHost: " + o.host + "\r\nContent-Type: application/json\r\n" +
                            AuthHeader(o) + "Transfer-Encoding: chunked\r\n\r\n");
  const std::string chunk = "100000\r\n" + std::string(size_t(1) << 20, ' ') + "\r\n";
  double peak = before;
  while (ok && r.big_body_sent < o.big_body_bytes) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0) break;  // the server answered: stop sending
    ok = SendAll(fd, chunk);
    if (ok) r.big_body_sent += int64_t(1) << 20;
    if ((r.big_body_sent >> 20) % 64 == 0) peak = std::max(peak, Rss(o.host, o.port));
  }
  pollfd p{fd, POLLIN, 0};
  for (auto until = Env::Default().Now() + std::chrono::seconds(10); Env::Default().Now() < until && answer.find("\r\n\r\n") == std::string::npos;) {
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    answer.append(buf, size_t(n));
  }
  ::close(fd);
  if (answer.rfind("HTTP/1.1 ", 0) == 0) r.big_body_status = std::atoi(answer.c_str() + 9);
  peak = std::max(peak, Rss(o.host, o.port));
  r.big_body_rss_growth_mib = (peak - before) / double(1 << 20);
}

// --- non-streaming clients that hang up ---
void HangUps(const FrontDoorOptions& o, const std::string& model, FrontDoorReport& r) {
  const int engine = o.engine_port > 0 ? o.engine_port : o.port;
  const std::string m0 = Metrics(o.host, engine);
  const double cancelled0 = Metric(m0, "tandem_requests_total", "outcome=\"cancelled\"");
  std::vector<int> fds;
  for (int i = 0; i < o.hang_ups; ++i) {
    Json b = {{"prompt", "A long answer " + std::to_string(i)}, {"max_tokens", o.hang_up_max_tokens},
              {"temperature", 1.0}, {"ignore_eos", true}};
    if (!model.empty()) b["model"] = model;
    const int fd = Connect(o.host, o.port);
    if (fd < 0 || !SendAll(fd, RawPost(o, b.dump()))) {
      if (fd >= 0) ::close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  // Until the engine has them all (running, or queued behind --max-running).
  double running = 0;
  for (auto until = Env::Default().Now() + std::chrono::seconds(30); Env::Default().Now() < until;) {
    const std::string m = Metrics(o.host, engine);
    running = Metric(m, "tandem_requests_running") + Metric(m, "tandem_requests_waiting");
    if (running >= double(fds.size())) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  r.hang_ups_running = int64_t(running);
  const auto t0 = Env::Default().Now();
  for (int fd : fds) ::close(fd);
  for (auto until = t0 + std::chrono::seconds(30); Env::Default().Now() < until;) {
    const std::string m = Metrics(o.host, engine);
    const double run = Metric(m, "tandem_requests_running"), wait = Metric(m, "tandem_requests_waiting");
    const double used = Metric(m, "tandem_cache_pages", "state=\"used\"");
    if (run == 0 && wait == 0 && used == 0) {
      r.hang_up_settled_ms = MsSince(t0);
      r.pages_used_after = used;
      r.hang_ups_cancelled = int64_t(Metric(m, "tandem_requests_total", "outcome=\"cancelled\"") - cancelled0);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string m = Metrics(o.host, engine);
  r.pages_used_after = Metric(m, "tandem_cache_pages", "state=\"used\"");
  r.hang_ups_cancelled = int64_t(Metric(m, "tandem_requests_total", "outcome=\"cancelled\"") - cancelled0);
}

}  // namespace

FrontDoorReport RunFrontDoor(const FrontDoorOptions& o) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  FrontDoorReport r;
  const std::string model = ModelId(o);
  if (model.empty()) {
    r.error = "GET /v1/models on " + o.host + ":" + std::to_string(o.port) + " did not name a model";
    return r;
  }
  if (o.idle > 0) Idle(o, r);
  if (o.streams > 0 && o.prompts > 0) Streams(o, model, r);
  if (o.slowloris > 0) Slowloris(o, model, r);
  if (o.big_body_bytes > 0) BigBody(o, r);
  if (o.hang_ups > 0) HangUps(o, model, r);
  return r;
}

Json ToJson(const FrontDoorReport& r) {
  return Json{
      {"idle", {{"held", r.idle_held}, {"bytes_per_connection", r.idle_bytes_per_connection}}},
      {"streams",
       {{"ok", r.streams_ok}, {"equal_to_alone", r.streams_equal}, {"failed", r.streams_failed},
        {"ttfb_p50_ms", r.ttfb_p50_ms}, {"ttfb_p99_ms", r.ttfb_p99_ms}, {"wall_s", r.streams_wall_s},
        {"health_probes", r.health_probes}, {"health_failed", r.health_failed}, {"health_p99_ms", r.health_p99_ms},
        {"health_max_ms", r.health_max_ms}}},
      {"slowloris",
       {{"closed", r.slow_closed}, {"got_408", r.slow_got_408}, {"open_at_end", r.slow_open_at_end},
        {"closed_after_s_min", r.slow_closed_after_s_min}, {"closed_after_s_max", r.slow_closed_after_s_max},
        {"request_ms", r.request_during_slowloris_ms}, {"request_status", r.request_during_slowloris_status}}},
      {"big_body",
       {{"status", r.big_body_status}, {"sent_bytes", r.big_body_sent}, {"rss_growth_mib", r.big_body_rss_growth_mib}}},
      {"hang_ups",
       {{"running", r.hang_ups_running}, {"cancelled", r.hang_ups_cancelled}, {"settled_ms", r.hang_up_settled_ms},
        {"pages_used_after", r.pages_used_after}}},
      {"error", r.error}};
}

}  // namespace tandem
