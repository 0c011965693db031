#include "node/router_node.h"

#include <algorithm>

#include "common/log.h"

namespace tandem::node {

StatusOr<std::unique_ptr<RouterNode>> RouterNode::Start(RouterNodeOptions o, Membership membership) {
  std::unique_ptr<RouterNode> node(new RouterNode());
  discovery::EngineRecord same_model;  // decode servers whose KV events this router can read: same weights
  if (o.discovery) {
    o.discovery->seal = membership.Signer();
    o.discovery->check = membership.Checker();
    node->discovery_ = std::make_unique<discovery::Discovery>(std::move(*o.discovery));
    o.router.discovered_backends = true;
    o.router.discovery_health = [d = node->discovery_.get()] { return d->Health(); };
    if (o.prompt_model != nullptr) {
      TANDEM_ASSIGN_OR_RETURN(discovery::KvCurveKeys keys, membership.KvKeys());
      same_model.weights = WeightsIdentity(*o.prompt_model);
      node->cached_ = std::make_unique<CachedPrefixes>();
      TANDEM_ASSIGN_OR_RETURN(node->subscriber_, discovery::KvEventSubscriber::Start(*node->cached_, keys));
      ModelInfo info;
      info.id = o.prompt_model->config().name;
      info.context_length = o.prompt_model->config().context_length;
      info.tokenizer = &o.prompt_model->tokenizer();
      info.chat_format = &o.prompt_model->chat_format();
      o.router.prompt_model = info;
      o.router.cached = node->cached_.get();
    }
    o.router.discovery_metrics = [d = node->discovery_.get(), s = node->subscriber_.get()] {
      return d->MetricsText() + (s != nullptr ? s->MetricsText() : std::string());
    };
  }
  const std::vector<std::string> fixed = o.router.backends;
  node->router_ = std::make_unique<Router>(std::move(o.router));
  TANDEM_RETURN_IF_ERROR(node->router_->Start());
  if (node->discovery_) {
    Router* router = node->router_.get();  // outlives the watch (Stop)
    node->discovery_->Watch("decode", [router, fixed, s = node->subscriber_.get(),
                                       same_model](const std::vector<discovery::EngineRecord>& records) {
      std::vector<std::string> addresses = MatchingAddresses(records, {});
      for (const std::string& f : fixed) {
        if (std::find(addresses.begin(), addresses.end(), f) == addresses.end()) addresses.push_back(f);
      }
      // Placement by KV events only where this router tokenizes as the server does (its model is theirs).
      if (s != nullptr) s->SetSources(KvSources(records, MatchingAddresses(records, same_model)));
      if (Status st = router->SetBackends(addresses); !st.ok()) TLOG_WARN("tandem router: %s\n", st.message().c_str());
    });
  }
  return node;
}

void RouterNode::Stop(std::chrono::milliseconds drain) {
  if (stopped_) return;
  stopped_ = true;
  if (discovery_) discovery_->Stop();  // the view stands from here
  if (router_) {
    router_->Drain(drain);
    router_->Stop();
  }
}

RouterNode::~RouterNode() {
  Stop(std::chrono::milliseconds(0));
  router_.reset();
  subscriber_.reset();
  cached_.reset();
  discovery_.reset();
}

}  // namespace tandem::node
