// The TCP transport (--transport tcp): one plain TCP stream per connection,
// for engines on different hosts or wherever shared memory is not wanted.
// UCX's TCP lane emulates one-sided puts with active messages and moved
// 16 KiB pages at 0.3x a plain socket here; this moves them at socket speed.
//
// Each connection has a writer thread (puts, messages and flush markers go
// out in the order they were posted, straight from the caller's memory) and
// a reader thread (puts are received straight into the named region, after a
// bounds check against the regions this transport allocated; messages are
// delivered in order; a flush marker is answered once every put before it
// has landed — TCP keeps the order). So Flush returns OK exactly when the
// peer has written every earlier put into its memory.
//
// The fence is real here: Close() stops this side's reader before it
// returns (unless called from the reader itself, which is then between
// frames), so once a decode engine has closed a connection, nothing sent on
// it can land in its memory any more.
//
// Bad input never crashes: an unknown frame type, a put outside every region
// or a message over the cap closes the connection with a message that says why.
#pragma once

#include <memory>

#include "transfer/transport.h"

namespace tandem::transfer {

class SocketTransport : public Transport {
 public:
  SocketTransport();
  ~SocketTransport() override;  // closes every connection, then frees the regions

  std::string name() const override { return "tcp"; }
  StatusOr<Region> AllocateRegion(size_t bytes) override;
  // address: "host:port" (IPv4); port 0 picks a free one (see listen_port()).
  Status Listen(const std::string& address,
                std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept) override;
  // Returns at once; the connection is made in the background (a failure
  // arrives as on_close). Sends and puts posted meanwhile wait for it.
  StatusOr<std::shared_ptr<Connection>> Connect(const std::string& address,
                                                ConnectionHandlers handlers) override;
  int listen_port() const override;
  // Connections wait for their first message in the acceptor thread's poll
  // loop (transfer/socket_gate.h), with no thread of their own.
  Status SetFirstMessageGate(FirstMessageGate gate) override;
  std::map<std::string, int64_t> refusals() const override;
  bool close_fences_peer_writes() const override { return true; }

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tandem::transfer
