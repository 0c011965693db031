// The OpenAI-compatible HTTP front end of one engine (cpp-httplib).
//
// HTTP handler threads only parse, submit to the engine and relay its events;
// the engine's loop thread owns the model and cache (llama.cpp's server-queue
// split). A streaming client that goes away cancels its request at once,
// which frees its pages at the engine's next step.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "runtime/engine.h"
#include "server/access.h"
#include "server/httplib_fwd.h"
#include "server/openai_api.h"

namespace tandem {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t max_body_bytes = size_t(8) << 20;
  std::string model_id;  // default: the model's general.name
  int http_threads = 128;
  AccessPolicy access;  // API keys and CORS (server/access.h)
};

class HttpServer {
 public:
  HttpServer(Engine& engine, const Model& model, ServerOptions options);
  ~HttpServer();

  // Binds and serves on a background thread. Fails with a message when the
  // address cannot be bound.
  Status Start();
  int port() const { return port_; }
  // Stops accepting and closes connections; waits up to `grace` for handlers
  // that are still writing their last bytes.
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

 private:
  void Routes();
  void HandleCompletion(const httplib::Request& req, httplib::Response& res, bool chat);
  // One handle per choice (n).
  void Stream(const ParsedRequest& parsed, std::vector<std::shared_ptr<RequestHandle>> handles,
              httplib::Response& res);
  void Collect(const ParsedRequest& parsed, const std::vector<std::shared_ptr<RequestHandle>>& handles,
               httplib::Response& res);

  Engine& engine_;
  const Model& model_;
  ServerOptions options_;
  ModelInfo info_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;
  std::atomic<int> active_streams_{0};
};

}  // namespace tandem
