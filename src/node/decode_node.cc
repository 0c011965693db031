#include "node/decode_node.h"

#include <algorithm>

#include "transfer/transport_kind.h"

namespace tandem::node {

StatusOr<std::unique_ptr<DecodeNode>> DecodeNode::Start(const Model& model, DecodeNodeOptions o,
                                                        Membership membership) {
  if (o.discovery && !o.decode) {
    return InvalidArgument("a node registers in discovery as a decode server: discovery needs the decode role");
  }
  std::unique_ptr<DecodeNode> node(new DecodeNode());
  if (o.discovery) {
    TANDEM_ASSIGN_OR_RETURN(node->kv_events_, PublishKvEvents(o.server.host, o.advertise, o.kv_events_port, membership));
    o.engine.prefix_events = node->kv_events_->Hook();
  }
  if (o.follow_kv_events && o.discovery && o.decode) {
    TANDEM_ASSIGN_OR_RETURN(discovery::KvCurveKeys keys, membership.KvKeys());
    node->cached_ = std::make_unique<CachedPrefixes>();
    TANDEM_ASSIGN_OR_RETURN(node->subscriber_, discovery::KvEventSubscriber::Start(*node->cached_, keys));
    o.decode->cached = node->cached_.get();
  }
  std::unique_ptr<EngineRole> role = std::make_unique<EngineRole>();
  if (o.decode) {
    o.decode->discovered = o.discovery.has_value();
    TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<decode::DecodeRole> decode,
                            decode::DecodeRole::Connect(model, o.engine, *o.decode));
    node->role_ = decode.get();
    role = std::move(decode);
  }
  TANDEM_ASSIGN_OR_RETURN(node->engine_, Engine::Create(model, o.engine, std::move(role)));
  if (o.discovery) {
    discovery::DiscoveryOptions d = *o.discovery;
    d.seal = membership.Signer();
    d.check = membership.Checker();
    node->discovery_ = std::make_unique<discovery::Discovery>(std::move(d));
    o.server.discovery_health = [d = node->discovery_.get()] { return d->Health(); };
    o.server.discovery_metrics = [d = node->discovery_.get(), s = node->subscriber_.get()] {
      return d->MetricsText() + (s != nullptr ? s->MetricsText() : std::string());
    };
  }
  node->server_ = std::make_unique<HttpServer>(*node->engine_, model, o.server);
  TANDEM_RETURN_IF_ERROR(node->server_->Start());
  if (node->discovery_) TANDEM_RETURN_IF_ERROR(node->Register(model, o));
  node->shutdown_timeout_ = o.shutdown_timeout;  // a node that never started drains nothing (0)
  return node;
}

// Registers this server (its load kept current), and with the decode role
// follows the prefill engines registered that compute what it needs.
Status DecodeNode::Register(const Model& model, const DecodeNodeOptions& o) {
  discovery::EngineRecord me;
  me.role = "decode";
  me.address = (o.advertise.empty() ? o.server.host : o.advertise) + ":" + std::to_string(server_->port());
  me.numerics = engine_->numerics().Id();
  me.kv_topic = kv_events_->topic();
  me.kv_events = kv_events_->events_endpoint();
  me.kv_snapshot = kv_events_->snapshot_endpoint();
  std::optional<decode::PrefillLinksOptions> links;
  if (o.decode) {
    TANDEM_ASSIGN_OR_RETURN(links, decode::DecodeRole::LinksOptions(model, o.engine, *o.decode));
    me.layout = links->layout_fingerprint;
    me.weights = links->weights_identity;
    me.instance = role_->instance_id();
  }
  Engine* engine = engine_.get();  // outlives the registration (Stop)
  discovery_->Register([me, engine] {
    discovery::EngineRecord now = me;
    const EngineStats s = engine->Stats();
    now.load = s.running + s.waiting;
    return now;
  });
  if (!o.decode) return Status::Ok();
  discovery::EngineRecord want;
  want.layout = links->layout_fingerprint;
  want.weights = links->weights_identity;
  want.transport = transfer::TransportFamily(o.decode->transport);
  discovery_->Watch("prefill", [role = role_, want, fixed = links->addresses,
                                subscriber = subscriber_.get()](const std::vector<discovery::EngineRecord>& records) {
    std::vector<std::string> addresses = MatchingAddresses(records, want);
    for (const std::string& f : fixed) {
      if (std::find(addresses.begin(), addresses.end(), f) == addresses.end()) addresses.push_back(f);
    }
    if (subscriber != nullptr) subscriber->SetSources(KvSources(records, addresses));
    role->SetPrefillAddresses(std::move(addresses));
  });
  return Status::Ok();
}

void DecodeNode::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (discovery_) discovery_->Stop();  // leave the router's list first: no new requests come while draining
  if (engine_) engine_->Shutdown(shutdown_timeout_);
  if (server_) server_->Stop();
}

DecodeNode::~DecodeNode() {
  Stop();
  server_.reset();
  discovery_.reset();
  engine_.reset();  // and its role, the links to the prefill engines
  subscriber_.reset();
  cached_.reset();
  kv_events_.reset();  // the engine's prefix index reported to it: gone last
}

}  // namespace tandem::node
