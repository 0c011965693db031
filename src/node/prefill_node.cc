#include "node/prefill_node.h"

#include "transfer/handshake.h"
#include "transfer/transport_kind.h"

namespace tandem::node {

StatusOr<std::unique_ptr<PrefillNode>> PrefillNode::Start(const Model& model, PrefillNodeOptions o,
                                                          Membership membership) {
  std::unique_ptr<PrefillNode> node(new PrefillNode());
  std::unique_ptr<transfer::Transport> transport;
  if (o.make_transport) {
    TANDEM_ASSIGN_OR_RETURN(transport, o.make_transport());
  } else {
    TANDEM_ASSIGN_OR_RETURN(transport, transfer::MakeTransport(o.transport_kind, o.prefill.cluster_key.Knock()));
  }
  node->family_ = transfer::TransportFamily(o.transport_kind);
  if (o.discovery) {
    TANDEM_ASSIGN_OR_RETURN(node->kv_events_, PublishKvEvents(o.host, o.advertise, o.kv_events_port, membership));
    o.prefill.engine.prefix_events = node->kv_events_->Hook();
  }
  TANDEM_ASSIGN_OR_RETURN(node->server_, PrefillServer::Create(model, o.prefill, std::move(transport)));
  PrefillServer::Wrap wrap;
  if (o.make_wrap) {
    TANDEM_ASSIGN_OR_RETURN(wrap, o.make_wrap(node->server_->engine()));
  }
  TANDEM_RETURN_IF_ERROR(node->server_->Listen(o.host + ":" + std::to_string(o.port), std::move(wrap)));
  if (o.discovery) {
    o.discovery->seal = membership.Signer();
    o.discovery->check = membership.Checker();
    node->discovery_ = std::make_unique<discovery::Discovery>(std::move(*o.discovery));
    PrefillEngine* worker = &node->server_->engine();  // outlives the registration (Stop)
    discovery::EngineRecord me;
    me.role = "prefill";
    me.instance = worker->instance_id();
    me.address = (o.advertise.empty() ? o.host : o.advertise) + ":" + std::to_string(node->server_->port());
    me.transport = node->family_;
    me.layout = worker->layout_fingerprint();
    me.weights = worker->weights_identity();
    me.numerics = worker->engine().numerics().Id();
    me.kv_topic = node->kv_events_->topic();
    me.kv_events = node->kv_events_->events_endpoint();
    me.kv_snapshot = node->kv_events_->snapshot_endpoint();
    node->discovery_->Register([me, worker] {
      discovery::EngineRecord now = me;
      now.load = worker->stats().in_flight;
      return now;
    });
  }
  return node;
}

void PrefillNode::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (discovery_) discovery_->Stop();  // leave every list before the engine goes
  if (server_) server_->Stop();        // no thread of it touches a connection once the transport goes
}

PrefillNode::~PrefillNode() {
  Stop();
  server_.reset();
  kv_events_.reset();  // the engine's prefix index reported to it: gone last
}

}  // namespace tandem::node
