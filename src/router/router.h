// The router: the public OpenAI endpoint of a disaggregated deployment. It
// forwards each request to a healthy decode server (each decode server owns
// its link to a prefill engine, so a decode server stands for a
// (prefill, decode) pair) and relays the answer — streamed
// chunk by chunk; a client that hangs up closes the upstream request, which
// cancels it there. A health checker polls every backend's /health on its
// own thread and connections; with no healthy backend the router answers 503
// at once. Both sides are event-driven (server/http_core.h,
// server/http_client.h): a relayed stream holds two sockets, not a thread.
//
// Placement keeps caches warm: a conversation (named by a hash of its first
// two messages, or of its prompt's start) goes back to the decode server that
// served it, unless that one is down or clearly busier than the least loaded
// (requests in flight); new conversations go to the least loaded.
//
// The prompt is tokenized once, by the decode server that serves it.
//
// A request outlives the decode server that serves it (router/relay.cc): a
// backend that does not answer, answers 5xx, or breaks a stream off, hands
// the request to another healthy backend — a stream as "continue after the
// tokens the client has" (the stream trace and tandem_resume of
// server/openai_api.h), spliced into the same client stream; the router pins
// a seed for requests sent without one, so the continuation is the answer
// the first backend would have given, bit for bit (invariant 5). At most
// max_moves moves a request; then the client gets an error that says so.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/access.h"
#include "server/openai_api.h"
#include "common/cached_prefixes.h"
#include <optional>

#include "common/env.h"
#include "common/mutex.h"
#include "common/placement.h"
#include "common/status.h"
#include "server/http_client.h"
#include "server/http_core.h"

namespace tandem {

struct RouterOptions {
  // The time request deadlines, silence, health checks and drains are kept by (tests give a fake one).
  const Env* env = &Env::Default();
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<std::string> backends;  // decode servers, "host:port"
  // The backends come from discovery (SetBackends) and may be none at start.
  bool discovered_backends = false;
  // Discovery's part of /health (a "discovery" member) and of /metrics.
  std::function<nlohmann::json()> discovery_health;
  std::function<std::string()> discovery_metrics;
  // Placement by what is cached (KV events, discovery/kv_events.h): with both
  // set, a prompt is tokenized here as its decode server would (the model's
  // tokenizer and chat template) and goes where the longest prefix of its
  // pages is held (common/cached_prefixes.h, by "host:port"), load breaking
  // ties; otherwise, and when no server holds any of it, by conversation.
  std::optional<ModelInfo> prompt_model;
  const CachedPrefixes* cached = nullptr;
  std::chrono::milliseconds health_interval{200};
  double request_timeout_s = 600;
  AccessPolicy access;  // API keys and CORS; the client's Authorization goes on to the backend
  HttpLimits http;      // deadlines, body and connection limits
  size_t max_answer_bytes = size_t(64) << 20;  // a whole (not streamed) upstream answer larger than this is a 502
  // Moves per request after its first backend (0: fail fast, as a plain
  // proxy would), and how long a move may wait for a healthy backend.
  int max_moves = 3;
  std::chrono::milliseconds move_wait{15'000};
  // A silent server is a failed one (invariant 10): a request whose backend
  // has sent it nothing for this long while the backend does not answer its
  // health checks (or answers that its loop is stalled) is taken from it
  // and moved, its stream resumed bit for bit. 0: never.
  std::chrono::milliseconds silence_timeout{5'000};
  // Set by `serve --disagg`: its supervisor's state file (node/supervisor.h),
  // shown in /health ("supervisor") and /metrics (restarts per child).
  std::string supervisor_state;
};

// A conversation's identity across rounds (placement affinity); 0: none.
uint64_t ConversationKey(const nlohmann::json& body);

class Router {
 public:
  explicit Router(RouterOptions options);
  ~Router();
  Status Start();
  int port() const { return core_ ? core_->port() : 0; }
  // Stops taking requests (503 with Retry-After; /health says draining) and
  // waits up to `deadline` for the ones in flight to finish.
  void Drain(std::chrono::milliseconds deadline);
  void Stop();
  // Replaces the set of decode servers (discovery's view; any thread): new
  // ones are health-checked and used, ones no longer named are unlisted (no
  // new request goes there; streams on them finish or move). At most
  // kMaxBackends different addresses over the router's life. An address that
  // is not host:port is left out (the others are used) and named in the error.
  Status SetBackends(const std::vector<std::string>& addresses);
  static constexpr size_t kMaxBackends = 256;

 private:
  struct Backend {
    std::string host;
    int port = 0;
    std::atomic<bool> listed{true};  // false: discovery no longer names it
    std::atomic<bool> healthy{false};
    // Since when (steady clock, ns; 0: not) its health checks have gone
    // unanswered or said its engine loop is stalled: what it holds may
    // never come (silence_timeout).
    std::atomic<int64_t> silent_since_ns{0};
    std::atomic<int64_t> forwarded{0}, failed{0};
    // Requests forwarded and not yet answered (shared with stream relays,
    // which may outlive a request handler).
    std::shared_ptr<std::atomic<int64_t>> in_flight = std::make_shared<std::atomic<int64_t>>(0);
  };
  class Relay;  // one client request across its backends (router/relay.cc)
  void CheckHealth();
  // A healthy backend, one not in `avoid` if there is any (or, with
  // `strictly_avoid`, only one not in it); null: none. `chain`: the prompt's
  // page keys (common/chain_key.h), for placement by what is cached; empty:
  // by conversation.
  Backend* Pick(uint64_t conversation, const std::vector<const Backend*>& avoid = {},
                const std::vector<uint64_t>& chain = {}, bool strictly_avoid = false);
  // The prompt's page keys when placement by what is cached is on and the
  // body parses; empty otherwise (the backend will say what is wrong).
  // Keyed by the request's tenant (server/access.h, CacheSaltFor), as the
  // decode server keys it.
  std::vector<uint64_t> PromptChain(const std::string& path, const std::string& body, const nlohmann::json& parsed,
                                    std::string_view authorization) const;
  void Forward(HttpRequest& req, const std::shared_ptr<HttpReply>& reply);
  std::string MetricsText() const;
  nlohmann::json SupervisorState() const;  // {} when none is set or readable

  // Every backend ever named, in the order first named: a slot is written
  // once, before backend_count_ covers it, and never freed (relays hold raw
  // pointers), so readers need no lock.
  std::span<const std::unique_ptr<Backend>> Backends() const {
    return {backends_.data(), backend_count_.load(std::memory_order_acquire)};
  }

  RouterOptions options_;
  std::array<std::unique_ptr<Backend>, kMaxBackends> backends_;
  std::atomic<size_t> backend_count_{0};
  Mutex set_mu_;  // one SetBackends at a time
  Mutex place_mu_;
  size_t next_ GUARDED_BY(place_mu_) = 0;
  AffinityMap affinity_ GUARDED_BY(place_mu_);  // conversation -> backend index
  std::atomic<int64_t> affinity_hits_{0};
  std::atomic<int64_t> cached_placements_{0}, cached_pages_{0};  // placed where KV events say the prefix is
  std::atomic<bool> stop_{false};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> unavailable_{0};
  std::atomic<int64_t> refused_{0};  // malformed requests answered 400 without a backend
  std::atomic<int64_t> moves_{0};    // requests handed to another backend
  // Why requests moved (each move counted once, by what ended its attempt).
  enum MoveReason {
    kStreamBroke,
    kStreamError,
    kNoAnswer,
    kAnswerBroke,
    kServerError,
    kUnavailable,
    kSilent,
    kMoveReasons
  };
  static const char* MoveReasonName(int reason);
  std::array<std::atomic<int64_t>, kMoveReasons> moves_by_reason_{};
  // Answers sent as the backend gave them, not moved: a 500 that a backend
  // already tried gave (never run twice on one backend, invariant 10).
  std::atomic<int64_t> not_moved_{0};
  std::atomic<int64_t> moves_exhausted_{0};  // requests that ran out of moves (or of time to wait for a backend)
  std::thread health_;
  // core_ before client_: calls (holding replies) go before the connections.
  std::unique_ptr<HttpCore> core_;
  std::unique_ptr<HttpClient> client_;
};

}  // namespace tandem
