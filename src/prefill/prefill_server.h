// The prefill role's endpoint: a prefill engine (prefill/prefill_engine.h)
// listening on a transport it is given — UCX or TCP in `tandem prefill`, the
// loopback transport in tests and `tandem bench prefill`.
//
// Create builds the engine; Listen opens the endpoint (its first-message gate
// first: nothing is spent on a peer before its Hello proves the cluster key)
// and routes every accepted connection's messages and closing to the engine.
// `wrap` may stand in front of each accepted connection (the fault library's
// faulty connection, say); the engine then only sees the wrapper.
//
// Stop ends every handoff and joins the engine's threads; the destructor
// does it too, then destroys the transport.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "prefill/prefill_engine.h"
#include "transfer/transport.h"

namespace tandem {

class PrefillServer {
 public:
  using Wrap = std::function<std::shared_ptr<transfer::Connection>(std::shared_ptr<transfer::Connection>)>;

  static StatusOr<std::unique_ptr<PrefillServer>> Create(const Model& model, PrefillOptions options,
                                                         std::unique_ptr<transfer::Transport> transport);
  ~PrefillServer();

  // Listens at `address` ("host:port", port 0: any free one; a loopback name).
  Status Listen(const std::string& address, Wrap wrap = nullptr) EXCLUDES(mu_);
  // Ends every handoff and joins the engine's threads (no thread of the
  // engine touches a connection afterwards); the destructor then closes the
  // transport.
  void Stop();

  PrefillEngine& engine() { return *engine_; }
  transfer::Transport& transport() { return *transport_; }
  int port() const { return transport_->listen_port(); }

 private:
  PrefillServer(std::unique_ptr<PrefillEngine> engine, std::unique_ptr<transfer::Transport> transport)
      : engine_(std::move(engine)), transport_(std::move(transport)) {}
  std::shared_ptr<transfer::Connection> Wrapped(transfer::Connection& raw) EXCLUDES(mu_);

  std::unique_ptr<PrefillEngine> engine_;
  Mutex mu_;
  // Accepted connections (by the transport's own object) -> what the engine
  // was given; until each closes.
  std::map<transfer::Connection*, std::shared_ptr<transfer::Connection>> wrapped_ GUARDED_BY(mu_);
  std::unique_ptr<transfer::Transport> transport_;  // after the engine and the map: its threads call into both
};

}  // namespace tandem
