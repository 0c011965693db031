// A serving process, assembled from options: the engine, its HTTP front
// (server/http_server.h) and, as a decode server, its decode role (the links
// to its prefill engines, decode/decode_role.h), its prefix cache's KV events,
// its prefill engines' KV events followed, and its signed discovery record.
// Without `decode` it is the colocated server: one engine computes prompts
// and decodes. `tandem serve` turns its flags into DecodeNodeOptions, starts
// a node, waits for a signal and stops it; a test can start one in process.
//
// Start: the KV events first (the engine's prefix index reports to them),
// then the role and the engine, the HTTP server, then the registration and
// the watch of the prefill engines. Stop: the registration first (the router
// stops sending while the node drains), then the engine drains (up to
// `shutdown_timeout`), then the HTTP server stops.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "decode/decode_role.h"
#include "discovery/discovery.h"
#include "discovery/kv_events.h"
#include "node/membership.h"
#include "runtime/engine.h"
#include "server/http_server.h"

namespace tandem::node {

struct DecodeNodeOptions {
  EngineOptions engine;  // its Env is the node's
  ServerOptions server;  // host, port, access, limits, on_drain
  // The decode role: prompts computed by the prefill engines at
  // decode->prefill_addresses (and, with discovery, those registered that
  // match). None: colocated.
  std::optional<decode::DecodeOptions> decode;
  // Registration (seal and check: the membership's), KV events published;
  // needs `decode` (a node registers as a decode server).
  std::optional<discovery::DiscoveryOptions> discovery;
  std::string advertise;  // the host peers reach this server at (default: server.host)
  int kv_events_port = 0;
  // With discovery and decode: follow the prefill engines' KV events (a
  // prompt goes where its longest prefix is cached).
  bool follow_kv_events = false;
  std::chrono::milliseconds shutdown_timeout{30000};  // Stop's drain
};

class DecodeNode {
 public:
  static StatusOr<std::unique_ptr<DecodeNode>> Start(const Model& model, DecodeNodeOptions options,
                                                     Membership membership);
  ~DecodeNode();
  DecodeNode(const DecodeNode&) = delete;
  DecodeNode& operator=(const DecodeNode&) = delete;

  void Stop();

  Engine& engine() { return *engine_; }
  int port() const { return server_->port(); }
  bool decode_server() const { return role_ != nullptr; }

 private:
  DecodeNode() = default;
  Status Register(const Model& model, const DecodeNodeOptions& o);

  std::unique_ptr<discovery::KvEventPublisher> kv_events_;
  std::unique_ptr<CachedPrefixes> cached_;
  std::unique_ptr<discovery::KvEventSubscriber> subscriber_;
  decode::DecodeRole* role_ = nullptr;  // owned by the engine
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<discovery::Discovery> discovery_;
  std::unique_ptr<HttpServer> server_;
  std::chrono::milliseconds shutdown_timeout_{0};  // set once Start succeeded
  bool stopped_ = false;
};

}  // namespace tandem::node
