#include "router/router.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <xxhash.h>

#include <strings.h>

#include <fstream>

#include "common/env.h"
#include "common/log.h"
#include "common/chain_key.h"
#include "common/process_start.h"
#include "server/openai_api.h"
#include "server/request_body.h"

namespace tandem {

Router::Router(RouterOptions options) : options_(std::move(options)) {
  if (Status st = SetBackends(options_.backends); !st.ok()) TLOG_ERROR("tandem router: %s\n", st.message().c_str());
}

Status Router::SetBackends(const std::vector<std::string>& addresses) {
  MutexLock lock(set_mu_);
  std::vector<std::pair<std::string, int>> named;
  Status refused = Status::Ok();  // the first address left out; the others are used
  for (const std::string& b : addresses) {
    const size_t colon = b.rfind(':');
    const std::string host = colon == std::string::npos ? b : b.substr(0, colon);
    const std::string port = colon == std::string::npos ? "80" : b.substr(colon + 1);
    const bool digits = !port.empty() && port.size() <= 5 && port.find_first_not_of("0123456789") == std::string::npos;
    const int number = digits ? std::stoi(port) : 0;
    if (host.empty() || number <= 0 || number > 65535) {
      if (refused.ok()) refused = InvalidArgument("'" + b + "' is not a decode server's host:port (left out)");
      continue;
    }
    named.emplace_back(host, number);
  }
  size_t count = backend_count_.load();
  for (size_t i = 0; i < count; ++i) {
    Backend& b = *backends_[i];
    const bool now = std::find(named.begin(), named.end(), std::make_pair(b.host, b.port)) != named.end();
    if (b.listed.exchange(now) != now) {
      TLOG_INFO("tandem router: decode server %s:%d %s\n", b.host.c_str(), b.port, now ? "listed again" : "unlisted");
    }
    if (!now) b.healthy = false;
    named.erase(std::remove(named.begin(), named.end(), std::make_pair(b.host, b.port)), named.end());
  }
  for (const auto& [host, port] : named) {
    if (count == kMaxBackends) {
      return ResourceExhausted("the router has known " + std::to_string(kMaxBackends) +
                               " decode servers: restart it to list " + host + ":" + std::to_string(port));
    }
    auto backend = std::make_unique<Backend>();
    backend->host = host;
    backend->port = port;
    backends_[count] = std::move(backend);
    backend_count_.store(++count, std::memory_order_release);
    if (core_) TLOG_INFO("tandem router: decode server %s:%d listed\n", host.c_str(), port);
  }
  return refused;
}

Router::~Router() { Stop(); }

void Router::CheckHealth() {
  while (!stop_) {
    for (auto& b : Backends()) {
      // An unlisted backend is still watched while it holds requests: they
      // move if it goes silent.
      if (!b->listed && b->in_flight->load() == 0) continue;
      httplib::Client cli(b->host, b->port);
      cli.set_connection_timeout(0, 300'000);
      cli.set_read_timeout(1, 0);
      auto res = cli.Get("/health");
      b->healthy = res && res->status == 200 && b->listed;
      bool stalled = false;
      if (res && res->status == 503) {
        const auto health = nlohmann::json::parse(res->body, nullptr, false);
        stalled = health.is_object() && health.value("status", "") == "stalled";
      }
      if (res && !stalled) {
        b->silent_since_ns = 0;
      } else if (b->silent_since_ns.load() == 0) {
        b->silent_since_ns = options_.env->Now().time_since_epoch().count();
      }
    }
    const auto until = options_.env->Now() + options_.health_interval;
    while (!stop_ && options_.env->Now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A conversation's identity across rounds: its first two messages (system
// prompt and first user turn) or its prompt's first 512 bytes; 0: none.
uint64_t ConversationKey(const nlohmann::json& body) {
  if (!body.is_object()) return 0;
  std::string text;
  if (auto m = body.find("messages"); m != body.end() && m->is_array() && !m->empty()) {
    // Replace, not throw, on a stray byte (the body was checked as UTF-8 already).
    const auto dump = [](const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); };
    text = dump((*m)[0]);
    if (m->size() > 1) text += dump((*m)[1]);
  } else if (auto p = body.find("prompt"); p != body.end() && p->is_string()) {
    text = p->get<std::string>().substr(0, 512);
  } else {
    return 0;
  }
  return XXH3_64bits(text.data(), text.size()) | 1;
}

std::vector<uint64_t> Router::PromptChain(const std::string& path, const std::string& body,
                                         const nlohmann::json& parsed, std::string_view authorization) const {
  if (!options_.prompt_model || options_.cached == nullptr) return {};
  ModelInfo info = *options_.prompt_model;
  if (auto m = parsed.find("model"); m != parsed.end() && m->is_string()) info.id = m->get<std::string>();
  info.logprobs = true;  // what the backend allows is its own check
  const ParseResult r = path == "/v1/chat/completions" ? ParseChatCompletionRequest(body, info)
                        : path == "/v1/completions"     ? ParseCompletionRequest(body, info)
                                                        : ParseResult(ApiError{});
  const ParsedRequest* p = std::get_if<ParsedRequest>(&r);
  if (p == nullptr) return {};
  return ChainKeys(p->spec.prompt, kChainPageTokens,
                   CacheRoot(CacheSaltFor(authorization, p->cache_salt)));
}

const char* Router::MoveReasonName(int reason) {
  switch (reason) {
    case kStreamBroke: return "stream_broke";    // a stream's connection lost or ended without [DONE]
    case kStreamError: return "stream_error";    // a stream ended by the backend's 5xx error frame
    case kNoAnswer: return "no_answer";          // no answer at all (connection failed or lost first)
    case kAnswerBroke: return "answer_broke";    // a whole answer cut off
    case kServerError: return "server_error";    // answered 500 or 502
    case kUnavailable: return "unavailable";     // answered 503 (draining, no engine)
    case kSilent: return "silent";               // nothing for silence_timeout from a backend that went silent
  }
  return "other";
}

Router::Backend* Router::Pick(uint64_t conversation, const std::vector<const Backend*>& avoid,
                              const std::vector<uint64_t>& chain, bool strictly_avoid) {
  MutexLock lock(place_mu_);  // one placement at a time: each sees the ones before it
  std::vector<int64_t> load;
  std::vector<bool> usable;
  bool other = false;  // a healthy backend outside `avoid`
  const auto backends = Backends();
  for (auto& b : backends) {
    load.push_back(b->in_flight->load());
    const bool avoided = std::find(avoid.begin(), avoid.end(), b.get()) != avoid.end();
    usable.push_back(b->healthy.load() && b->listed.load() && !avoided);
    other = other || usable.back();
  }
  if (!other && strictly_avoid) return nullptr;
  if (!other) {  // every healthy one was tried: any healthy one again
    for (size_t i = 0; i < backends.size(); ++i) usable[i] = backends[i]->healthy.load() && backends[i]->listed.load();
  }
  int preferred = -1;
  int64_t held = 0;
  if (!chain.empty() && options_.cached != nullptr) {
    std::vector<std::string> names;
    for (const auto& b : backends) names.push_back(b->host + ":" + std::to_string(b->port));
    preferred = options_.cached->Longest(names, chain, &held);
  }
  const bool by_cache = preferred >= 0;
  if (!by_cache && conversation != 0) preferred = affinity_.Find(conversation);
  const int i = PickTarget(load, usable, preferred, &next_);
  if (i < 0) return nullptr;
  if (conversation != 0) affinity_.Record(conversation, i);
  if (i == preferred && by_cache) {
    ++cached_placements_;
    cached_pages_ += held;
  } else if (i == preferred) {
    ++affinity_hits_;
  }
  ++*backends[size_t(i)]->in_flight;  // counted before the next Pick looks (the caller gives it back)
  return backends[size_t(i)].get();
}

Status Router::Start() {
  if (Backends().empty() && !options_.discovered_backends) {
    return InvalidArgument("the router needs at least one --decode backend (or --discovery)");
  }
  client_ = std::make_unique<HttpClient>();
  core_ = std::make_unique<HttpCore>(options_.http, options_.access);
  core_->Route("GET", "/health", [this](HttpRequest&, std::shared_ptr<HttpReply> reply) {
    const auto backends = Backends();
    const bool any = !draining_ && std::any_of(backends.begin(), backends.end(), [](const auto& b) { return b->healthy.load(); });
    nlohmann::json health = {{"status", draining_ ? "draining" : any ? "ok" : "no healthy backend"}};
    if (options_.discovery_health) health["discovery"] = options_.discovery_health();
    if (auto state = SupervisorState(); !state.empty()) health["supervisor"] = std::move(state);
    reply->Send(any ? 200 : 503, "application/json", health.dump());
  }, /*quick=*/true);
  core_->Route("GET", "/metrics", [this](HttpRequest&, std::shared_ptr<HttpReply> reply) {
    reply->Send(200, "text/plain; version=0.0.4",
                MetricsText() + core_->MetricsText("tandem_router_") +
                    (options_.discovery_metrics ? options_.discovery_metrics() : std::string()));
  }, /*quick=*/true);
  auto forward = [this](HttpRequest& req, std::shared_ptr<HttpReply> reply) { Forward(req, reply); };
  core_->Route("POST", "/v1/chat/completions", forward);
  core_->Route("POST", "/v1/completions", forward);
  core_->Route("GET", "/v1/models", forward);
  health_ = std::thread([this] { CheckHealth(); });
  // Wait for the first health round so the first request is routed correctly.
  auto none_healthy = [this] {
    const auto backends = Backends();
    return std::none_of(backends.begin(), backends.end(), [](const auto& b) { return b->healthy.load(); });
  };
  for (int i = 0; i < 100 && !Backends().empty() && none_healthy(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return core_->Start(options_.host, options_.port);
}

void Router::Drain(std::chrono::milliseconds deadline) {
  draining_ = true;
  const auto until = options_.env->Now() + deadline;
  auto busy = [&] {
    const auto backends = Backends();
    return std::any_of(backends.begin(), backends.end(), [](const auto& b) { return b->in_flight->load() > 0; });
  };
  while (busy() && options_.env->Now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void Router::Stop() {
  if (stop_.exchange(true)) return;
  if (core_) core_->Stop();        // hang-ups cancel their upstream calls
  if (client_) client_->Stop();
  if (health_.joinable()) health_.join();
}

nlohmann::json Router::SupervisorState() const {
  if (options_.supervisor_state.empty()) return nlohmann::json::object();
  std::ifstream in(options_.supervisor_state);
  std::string text(4096, '\0');  // a few children's lines: anything longer is not the launcher's
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(size_t(in.gcount()));
  auto state = nlohmann::json::parse(text, nullptr, false);
  if (state.is_discarded() || !state.is_object() || !state.contains("children") || !state["children"].is_object()) {
    return nlohmann::json::object();
  }
  return state;
}

std::string Router::MetricsText() const {
  char start[64];
  std::snprintf(start, sizeof(start), "%.3f", ProcessStartUnixSeconds());
  std::string out = std::string("# HELP tandem_process_start_time_seconds When this process started (Unix seconds)\n"
                                "# TYPE tandem_process_start_time_seconds gauge\ntandem_process_start_time_seconds ") +
                    start + "\n# HELP tandem_router_backend_healthy 1 when the decode backend answers /health\n"
                    "# TYPE tandem_router_backend_healthy gauge\n";
  for (const auto& b : Backends()) {
    if (!b->listed) continue;
    out += "tandem_router_backend_healthy{backend=\"" + b->host + ":" + std::to_string(b->port) + "\"} " +
           (b->healthy ? "1" : "0") + "\n";
  }
  out += "# HELP tandem_router_forwarded_total Requests forwarded per backend\n# TYPE tandem_router_forwarded_total counter\n";
  for (const auto& b : Backends()) {
    out += "tandem_router_forwarded_total{backend=\"" + b->host + ":" + std::to_string(b->port) + "\"} " +
           std::to_string(b->forwarded.load()) + "\n";
  }
  out += "# HELP tandem_router_unavailable_total Requests answered 503 for lack of a healthy backend\n"
         "# TYPE tandem_router_unavailable_total counter\ntandem_router_unavailable_total " +
         std::to_string(unavailable_.load()) + "\n";
  if (const auto state = SupervisorState(); !state.empty()) {
    out += "# HELP tandem_supervisor_restarts_total Times serve --disagg restarted a child that exited by itself\n"
           "# TYPE tandem_supervisor_restarts_total counter\n";
    std::string up = "# HELP tandem_supervisor_child_up 1 while the child runs (0: exited, being restarted)\n"
                     "# TYPE tandem_supervisor_child_up gauge\n";
    std::string drains = "# HELP tandem_supervisor_drains_total Times serve --disagg started again a child that drained "
                         "and exited cleanly (no restart budget spent)\n"
                         "# TYPE tandem_supervisor_drains_total counter\n";
    for (const auto& [name, child] : state["children"].items()) {
      const std::string label = "{child=\"" + name + "\"} ";
      out += "tandem_supervisor_restarts_total" + label + std::to_string(child.value("restarts", 0)) + "\n";
      up += "tandem_supervisor_child_up" + label + (child.value("up", false) ? "1" : "0") + "\n";
      drains += "tandem_supervisor_drains_total" + label + std::to_string(child.value("drains", 0)) + "\n";
    }
    out += up + drains;
  }
  out += "# HELP tandem_router_malformed_total Requests refused (4xx) by the router's own checks before any backend\n"
         "# TYPE tandem_router_malformed_total counter\ntandem_router_malformed_total " +
         std::to_string(refused_.load()) + "\n";
  out += "# HELP tandem_router_moves_total Requests handed to another backend (its stream continued there)\n"
         "# TYPE tandem_router_moves_total counter\ntandem_router_moves_total " + std::to_string(moves_.load()) + "\n";
  out += "# HELP tandem_router_moves_by_reason_total Requests handed to another backend, by what ended the attempt\n"
         "# TYPE tandem_router_moves_by_reason_total counter\n";
  for (int r = 0; r < kMoveReasons; ++r) {
    out += std::string("tandem_router_moves_by_reason_total{reason=\"") + MoveReasonName(r) + "\"} " +
           std::to_string(moves_by_reason_[size_t(r)].load()) + "\n";
  }
  out += "# HELP tandem_router_not_moved_total Failed answers sent as the backend gave them: a 500 when every "
         "healthy backend has already run the request (a 500 never runs it twice on one backend)\n"
         "# TYPE tandem_router_not_moved_total counter\ntandem_router_not_moved_total " +
         std::to_string(not_moved_.load()) + "\n";
  out += "# HELP tandem_router_moves_exhausted_total Requests failed after their last move, or with no backend to move to\n"
         "# TYPE tandem_router_moves_exhausted_total counter\ntandem_router_moves_exhausted_total " +
         std::to_string(moves_exhausted_.load()) + "\n";
  out += "# HELP tandem_router_affinity_hits_total Requests placed on the backend that served their conversation before\n"
         "# TYPE tandem_router_affinity_hits_total counter\ntandem_router_affinity_hits_total " +
         std::to_string(affinity_hits_.load()) + "\n";
  out += "# HELP tandem_router_cached_placements_total Requests placed on the decode server its KV events say holds the "
         "longest prefix of the prompt\n# TYPE tandem_router_cached_placements_total counter\ntandem_router_cached_placements_total " +
         std::to_string(cached_placements_.load()) + "\n";
  out += "# HELP tandem_router_cached_prefix_pages_total Prompt pages those placements found held there\n"
         "# TYPE tandem_router_cached_prefix_pages_total counter\ntandem_router_cached_prefix_pages_total " +
         std::to_string(cached_pages_.load()) + "\n";
  out += "# HELP tandem_router_backend_in_flight Requests forwarded and not yet answered\n# TYPE tandem_router_backend_in_flight gauge\n";
  for (const auto& b : Backends()) {
    out += "tandem_router_backend_in_flight{backend=\"" + b->host + ":" + std::to_string(b->port) + "\"} " +
           std::to_string(b->in_flight->load()) + "\n";
  }
  return out;
}

}  // namespace tandem
