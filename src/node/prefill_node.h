// A prefill engine process, assembled from options: the engine and its
// handoff endpoint on a transport (prefill/prefill_server.h), its prefix
// cache's KV events, and its signed discovery record. `tandem prefill` turns
// its flags into PrefillNodeOptions, starts a node, waits for a signal and
// stops it; a test can start one in process on any transport.
//
// Start: the KV events publisher first (the engine's prefix index reports to
// it), then the engine and its endpoint, then the registration. Stop (and the
// destructor): the registration first (no new decode server finds it while
// it goes), then the endpoint and the engine, the publisher last.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "discovery/discovery.h"
#include "discovery/kv_events.h"
#include "node/membership.h"
#include "prefill/prefill_server.h"
#include "transfer/transport.h"
#include "transfer/transport_kind.h"

namespace tandem::node {

struct PrefillNodeOptions {
  PrefillOptions prefill;  // the engine, its queue, peer liveness, the cluster key, the Env
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free one
  // The endpoint's transport; none: one of `transport_kind` with the cluster
  // key's knock. transport_kind names the family the record advertises either way.
  std::function<StatusOr<std::unique_ptr<transfer::Transport>>()> make_transport;
  transfer::TransportKind transport_kind = transfer::TransportKind::kAuto;
  // What stands in front of each accepted connection (the fault library's, in
  // tests), made once the engine exists; none: nothing.
  std::function<StatusOr<PrefillServer::Wrap>(PrefillEngine&)> make_wrap;
  // Registration: when set, the node registers (options.seal and .check are
  // the membership's) and publishes its KV events.
  std::optional<discovery::DiscoveryOptions> discovery;
  std::string advertise;  // the host peers dial (default: host)
  int kv_events_port = 0;
};

class PrefillNode {
 public:
  static StatusOr<std::unique_ptr<PrefillNode>> Start(const Model& model, PrefillNodeOptions options,
                                                      Membership membership);
  ~PrefillNode();
  PrefillNode(const PrefillNode&) = delete;
  PrefillNode& operator=(const PrefillNode&) = delete;

  void Stop();

  PrefillEngine& engine() { return server_->engine(); }
  int port() const { return server_->port(); }
  // "tcp", "ucx", ...: how its handoffs travel (its discovery record says so too).
  const char* transport_family() const { return family_; }

 private:
  PrefillNode() = default;

  std::unique_ptr<discovery::KvEventPublisher> kv_events_;
  std::unique_ptr<PrefillServer> server_;
  std::unique_ptr<discovery::Discovery> discovery_;
  const char* family_ = "";
  bool stopped_ = false;
};

}  // namespace tandem::node
