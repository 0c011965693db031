// A router process, assembled from options: the router (router/router.h),
// and with discovery the decode servers it follows (their signed records)
// and, given the model to tokenize prompts with, their KV events, by which
// requests go where their longest prefix is cached. `tandem router` turns its
// flags into RouterNodeOptions, starts a node, waits for a signal and stops it.
//
// Stop(drain): the watch first (the view stands), then new requests get 503
// while those in flight finish (up to `drain`), then the router stops.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/cached_prefixes.h"
#include "discovery/discovery.h"
#include "discovery/kv_events.h"
#include "model/model.h"
#include "node/membership.h"
#include "router/router.h"

namespace tandem::node {

struct RouterNodeOptions {
  RouterOptions router;  // its fixed backends, timeouts, access, limits, Env
  // Follow the decode servers registered there (seal and check: the membership's).
  std::optional<discovery::DiscoveryOptions> discovery;
  // With discovery: the decode servers' model, to tokenize prompts as they do
  // and place by their KV events (only those of the same weights); null: by
  // conversation and load.
  const Model* prompt_model = nullptr;
};

class RouterNode {
 public:
  static StatusOr<std::unique_ptr<RouterNode>> Start(RouterNodeOptions options, Membership membership);
  ~RouterNode();
  RouterNode(const RouterNode&) = delete;
  RouterNode& operator=(const RouterNode&) = delete;

  void Stop(std::chrono::milliseconds drain);
  int port() const { return router_->port(); }
  bool by_kv_events() const { return subscriber_ != nullptr; }

 private:
  RouterNode() = default;

  std::unique_ptr<discovery::Discovery> discovery_;
  std::unique_ptr<CachedPrefixes> cached_;
  std::unique_ptr<discovery::KvEventSubscriber> subscriber_;
  std::unique_ptr<Router> router_;
  bool stopped_ = false;
};

}  // namespace tandem::node
