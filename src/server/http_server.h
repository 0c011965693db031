// The OpenAI-compatible HTTP front end of one engine, on the event-driven
// HttpCore (server/http_core.h).
//
// Worker threads parse and submit; the engine's loop thread owns the model
// and cache (llama.cpp's server-queue split). An answer is event-driven: the
// engine's push of an event wakes the request's exchange, which turns the
// events into SSE frames or, at the end, one JSON answer. No thread waits
// for a request. A client that goes away, streaming or not, cancels its
// request at once, which frees its pages at the engine's next step.
#pragma once

#include <atomic>
#include <functional>
#include <nlohmann/json.hpp>
#include <memory>
#include <string>
#include <unordered_map>

#include "runtime/engine.h"
#include "server/access.h"
#include "server/http_core.h"
#include "server/openai_api.h"

namespace tandem {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  std::string model_id;  // default: the model's general.name
  HttpLimits http;       // deadlines, body and connection limits
  AccessPolicy access;   // API keys and CORS (server/access.h)
  // POST /admin/drain (an operator's key, --admin-key-file): what begins this server's
  // drain (serve: a SIGTERM to itself). None: the route answers 404.
  std::function<void()> on_drain;
  // Discovery's part of /health (a "discovery" member) and of /metrics, when
  // the server registers itself (discovery/discovery.h); none: left out.
  std::function<nlohmann::json()> discovery_health;
  std::function<std::string()> discovery_metrics;
};

class HttpServer {
 public:
  HttpServer(Engine& engine, const Model& model, ServerOptions options);
  ~HttpServer();

  // Binds and serves on background threads. Fails with a message when the
  // address cannot be bound.
  Status Start();
  int port() const { return core_ ? core_->port() : 0; }
  // Waits up to `grace` for answers in progress to finish, then cancels the
  // rest, stops accepting and closes connections.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

  class Exchange;  // one request's answer in progress

 private:
  void HandleCompletion(HttpRequest& req, const std::shared_ptr<HttpReply>& reply, bool chat);
  // Registers the exchange and listens to its handles; false when stopping.
  bool Track(const std::shared_ptr<Exchange>& exchange, const std::vector<std::shared_ptr<RequestHandle>>& handles);
  void Forget(Exchange* exchange);

  Engine& engine_;
  ServerOptions options_;
  ModelInfo info_;
  std::unique_ptr<HttpCore> core_;
  Mutex mu_;
  std::condition_variable idle_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::unordered_map<Exchange*, std::shared_ptr<Exchange>> live_ GUARDED_BY(mu_);
};

}  // namespace tandem
