#include "router/router.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <xxhash.h>

#include <condition_variable>
#include <deque>

#include "common/process_start.h"
#include "server/listen_backlog.h"
#include "server/openai_api.h"

namespace tandem {
namespace {

void Unavailable503(httplib::Response& res, const std::string& why) {
  ApiError e;
  e.http_status = 503;
  e.type = "server_error";
  e.message = why;
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(e), "application/json");
}

}  // namespace

Router::Router(RouterOptions options) : options_(std::move(options)) {
  for (const std::string& b : options_.backends) {
    auto backend = std::make_unique<Backend>();
    const size_t colon = b.rfind(':');
    backend->host = colon == std::string::npos ? b : b.substr(0, colon);
    backend->port = colon == std::string::npos ? 80 : std::atoi(b.c_str() + colon + 1);
    backends_.push_back(std::move(backend));
  }
}

Router::~Router() { Stop(); }

void Router::CheckHealth() {
  while (!stop_) {
    for (auto& b : backends_) {
      httplib::Client cli(b->host, b->port);
      cli.set_connection_timeout(0, 300'000);
      cli.set_read_timeout(1, 0);
      auto res = cli.Get("/health");
      b->healthy = res && res->status == 200;
    }
    const auto until = std::chrono::steady_clock::now() + options_.health_interval;
    while (!stop_ && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A conversation's identity across rounds: its first two messages (system
// prompt and first user turn) or its prompt's first 512 bytes; 0: none.
uint64_t ConversationKey(const nlohmann::json& body) {
  if (!body.is_object()) return 0;
  std::string text;
  if (auto m = body.find("messages"); m != body.end() && m->is_array() && !m->empty()) {
    text = (*m)[0].dump();
    if (m->size() > 1) text += (*m)[1].dump();
  } else if (auto p = body.find("prompt"); p != body.end() && p->is_string()) {
    text = p->get<std::string>().substr(0, 512);
  } else {
    return 0;
  }
  return XXH3_64bits(text.data(), text.size()) | 1;
}

Router::Backend* Router::Pick(uint64_t conversation) {
  MutexLock lock(place_mu_);  // one placement at a time: each sees the ones before it
  std::vector<int64_t> load;
  std::vector<bool> usable;
  for (auto& b : backends_) {
    load.push_back(b->in_flight->load());
    usable.push_back(b->healthy.load());
  }
  const int preferred = conversation != 0 ? affinity_.Find(conversation) : -1;
  const int i = PickTarget(load, usable, preferred, &next_);
  if (i < 0) return nullptr;
  if (conversation != 0) affinity_.Record(conversation, i);
  if (i == preferred) ++affinity_hits_;
  ++*backends_[size_t(i)]->in_flight;  // counted before the next Pick looks (the caller gives it back)
  return backends_[size_t(i)].get();
}

Status Router::Start() {
  if (backends_.empty()) return InvalidArgument("the router needs at least one --decode backend");
  server_ = std::make_unique<httplib::Server>();
  server_->new_task_queue = [] { return new httplib::ThreadPool(128); };
  server_->set_payload_max_length(options_.max_body_bytes);
  InstallCors(*server_, options_.access);
  server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool any = std::any_of(backends_.begin(), backends_.end(), [](const auto& b) { return b->healthy.load(); });
    res.status = any ? 200 : 503;
    res.set_content(any ? "{\"status\":\"ok\"}" : "{\"status\":\"no healthy backend\"}", "application/json");
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(MetricsText(), "text/plain; version=0.0.4");
  });
  auto forward = [this](const httplib::Request& req, httplib::Response& res) { Forward(req, res); };
  server_->Post("/v1/chat/completions", forward);
  server_->Post("/v1/completions", forward);
  server_->Get("/v1/models", forward);
  port_ = options_.port;
  if (port_ == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ < 0) return Unavailable("cannot bind any port on " + options_.host);
  } else if (!server_->bind_to_port(options_.host, port_)) {
    return Unavailable("cannot bind " + options_.host + ":" + std::to_string(port_));
  }
  health_ = std::thread([this] { CheckHealth(); });
  // Wait for the first health round so the first request is routed correctly.
  for (int i = 0; i < 100 && std::none_of(backends_.begin(), backends_.end(), [](const auto& b) { return b->healthy.load(); }); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  RaiseListenBacklog(port_);
  if (!StartListening(*server_, &listener_, std::chrono::seconds(10))) {
    return Unavailable("the HTTP listener on port " + std::to_string(port_) + " did not start within 10 s");
  }
  return Status::Ok();
}

void Router::Stop() {
  if (stop_.exchange(true)) return;
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
  if (health_.joinable()) health_.join();
}

void Router::Forward(const httplib::Request& req, httplib::Response& res) {
  if (!Admit(options_.access, req, res)) return;
  const auto body = nlohmann::json::parse(req.body, nullptr, false);
  Backend* b = Pick(body.is_discarded() ? 0 : ConversationKey(body));
  if (!b) {
    ++unavailable_;
    return Unavailable503(res, "no healthy decode backend");
  }
  const bool stream = !body.is_discarded() && body.is_object() && body.value("stream", false) == true;
  if (stream) return ForwardStream(req, res, *b);  // its relay gives the in-flight count back
  struct Done {
    std::atomic<int64_t>& n;
    ~Done() { --n; }
  } done{*b->in_flight};
  httplib::Client cli(b->host, b->port);
  cli.set_read_timeout(std::chrono::milliseconds(int64_t(options_.request_timeout_s * 1000)));
  httplib::Headers headers;
  if (req.has_header("Authorization")) headers.emplace("Authorization", req.get_header_value("Authorization"));
  auto up = req.method == "GET" ? cli.Get(req.path.c_str(), headers)
                                : cli.Post(req.path.c_str(), headers, req.body, req.get_header_value("Content-Type").c_str());
  if (!up) {
    ++b->failed;
    b->healthy = false;
    return Unavailable503(res, "decode backend " + b->host + ":" + std::to_string(b->port) + " did not answer");
  }
  ++b->forwarded;
  res.status = up->status;
  for (const char* h : {"Retry-After", "WWW-Authenticate"}) {
    if (up->has_header(h)) res.set_header(h, up->get_header_value(h));
  }
  res.set_content(up->body, up->get_header_value("Content-Type").c_str());
}

// The upstream request runs on its own thread and feeds a queue; the client's
// chunked provider drains it. Either side ending ends the other.
void Router::ForwardStream(const httplib::Request& req, httplib::Response& res, Backend& b) {
  struct Relay {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::string> chunks;
    bool done = false, cancelled = false, headers = false;
    int status = 0;
    std::string content_type = "text/event-stream";
    std::thread upstream;
  };
  auto relay = std::make_shared<Relay>();
  const std::string body = req.body, path = req.path, host = b.host, authorization = req.get_header_value("Authorization");
  const int port = b.port;
  const double timeout = options_.request_timeout_s;
  relay->upstream = std::thread([relay, body, path, host, port, timeout, authorization, in_flight = b.in_flight] {
    struct Done {
      std::atomic<int64_t>& n;
      ~Done() { --n; }
    } done{*in_flight};
    httplib::Client cli(host, port);
    cli.set_read_timeout(std::chrono::milliseconds(int64_t(timeout * 1000)));
    httplib::Request up;
    up.method = "POST";
    up.path = path;
    up.body = body;
    up.set_header("Content-Type", "application/json");
    if (!authorization.empty()) up.set_header("Authorization", authorization);
    up.response_handler = [relay](const httplib::Response& r) {
      std::lock_guard<std::mutex> lock(relay->mu);
      relay->status = r.status;
      relay->headers = true;
      relay->cv.notify_all();
      return true;
    };
    up.content_receiver = [relay](const char* data, size_t n, uint64_t, uint64_t) {
      std::lock_guard<std::mutex> lock(relay->mu);
      relay->chunks.emplace_back(data, n);
      relay->cv.notify_all();
      return !relay->cancelled;  // false hangs up: the decode server cancels
    };
    httplib::Response r;
    httplib::Error err;
    cli.send(up, r, err);
    std::lock_guard<std::mutex> lock(relay->mu);
    if (!relay->headers) relay->status = r.status;
    relay->done = true;
    relay->cv.notify_all();
  });
  ++b.forwarded;
  // The status line goes out before the body: learn the upstream's first.
  {
    std::unique_lock<std::mutex> lock(relay->mu);
    relay->cv.wait(lock, [&] { return relay->headers || relay->done; });
    if (relay->status != 200) {
      // An error (or no answer): relay it whole, not as a stream.
      relay->cv.wait(lock, [&] { return relay->done; });
      std::string all;
      for (auto& c : relay->chunks) all += c;
      lock.unlock();
      relay->upstream.join();
      if (relay->status == 0) {
        ++b.failed;
        b.healthy = false;
        return Unavailable503(res, "decode backend " + b.host + ":" + std::to_string(b.port) + " did not answer");
      }
      res.status = relay->status;
      return res.set_content(all, "application/json");
    }
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [relay](size_t, httplib::DataSink& sink) {
        std::unique_lock<std::mutex> lock(relay->mu);
        relay->cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return relay->done || !relay->chunks.empty(); });
        while (!relay->chunks.empty()) {
          std::string c = std::move(relay->chunks.front());
          relay->chunks.pop_front();
          lock.unlock();
          const bool ok = sink.write(c.data(), c.size());
          lock.lock();
          if (!ok) {
            relay->cancelled = true;
            return false;
          }
        }
        if (relay->done) sink.done();
        return true;
      },
      [relay](bool) {
        {
          std::lock_guard<std::mutex> lock(relay->mu);
          relay->cancelled = true;
        }
        if (relay->upstream.joinable()) relay->upstream.join();
      });
}

std::string Router::MetricsText() const {
  char start[64];
  std::snprintf(start, sizeof(start), "%.3f", ProcessStartUnixSeconds());
  std::string out = std::string("# HELP tandem_process_start_time_seconds When this process started (Unix seconds)\n"
                                "# TYPE tandem_process_start_time_seconds gauge\ntandem_process_start_time_seconds ") +
                    start + "\n# HELP tandem_router_backend_healthy 1 when the decode backend answers /health\n"
                    "# TYPE tandem_router_backend_healthy gauge\n";
  for (const auto& b : backends_) {
    out += "tandem_router_backend_healthy{backend=\"" + b->host + ":" + std::to_string(b->port) + "\"} " +
           (b->healthy ? "1" : "0") + "\n";
  }
  out += "# HELP tandem_router_forwarded_total Requests forwarded per backend\n# TYPE tandem_router_forwarded_total counter\n";
  for (const auto& b : backends_) {
    out += "tandem_router_forwarded_total{backend=\"" + b->host + ":" + std::to_string(b->port) + "\"} " +
           std::to_string(b->forwarded.load()) + "\n";
  }
  out += "# HELP tandem_router_unavailable_total Requests answered 503 for lack of a healthy backend\n"
         "# TYPE tandem_router_unavailable_total counter\ntandem_router_unavailable_total " +
         std::to_string(unavailable_.load()) + "\n";
  out += "# HELP tandem_router_affinity_hits_total Requests placed on the backend that served their conversation before\n"
         "# TYPE tandem_router_affinity_hits_total counter\ntandem_router_affinity_hits_total " +
         std::to_string(affinity_hits_.load()) + "\n";
  out += "# HELP tandem_router_backend_in_flight Requests forwarded and not yet answered\n# TYPE tandem_router_backend_in_flight gauge\n";
  for (const auto& b : backends_) {
    out += "tandem_router_backend_in_flight{backend=\"" + b->host + ":" + std::to_string(b->port) + "\"} " +
           std::to_string(b->in_flight->load()) + "\n";
  }
  return out;
}

}  // namespace tandem
