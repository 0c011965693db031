// The UCX transport: one UCP worker per transport (thread-safe mode), a
// progress thread, sockaddr connections (so `tcp` must be among UCX_TLS even
// when data moves over shared memory), one-sided puts into regions mapped
// with UCP_MEM_MAP_ALLOCATE (user memory turns shared-memory puts into
// emulated messages), ep flush for Flush, and active messages for Send.
// Messages are delivered on a dedicated thread, one at a time, in order.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "transfer/transport.h"

namespace tandem::transfer {

// The head of a UCX region's RemoteKey::blob; UCX's packed rkey follows. The
// segment fields let a peer prove the region's shared memory still exists
// before UCX attaches it (see ucx.cc).
struct UcxKeyHeader {
  uint64_t base = 0;          // the region's address in the owner's process
  int64_t shmid = -1;         // SysV segment holding the region, or -1
  uint64_t ipc_identity = 0;  // which kernel and IPC namespace shmid lives in
  uint64_t bytes = 0;         // the region's size: no put past it is posted, whatever the caller's key says
};

class UcxTransport : public Transport {
 public:
  // shm_only: shared memory for the puts, TCP only to set connections up
  // (one host); otherwise whatever UCX finds (UCX_TLS is honoured).
  // knock (ClusterKey::Knock(); 0: none): sent as the worker's client id with
  // every connection request, and required of every request the listener
  // gets: one without it is rejected before an endpoint exists, so through
  // the listener it can make the worker hold nothing (UCX reassembles a
  // multi-fragment eager message before any screen sees it). Counted in
  // refusals(). Not covered: a peer that reaches one of the worker's own
  // transport interfaces directly (UCX's TCP interface listens on a port of
  // its own) with a worker address it built; UCX wires such a peer up without
  // asking the listener (docs/handoff-wire-format.md).
  static StatusOr<std::unique_ptr<UcxTransport>> Create(bool shm_only = false, uint64_t knock = 0);
  ~UcxTransport() override;

  std::string name() const override { return "ucx"; }
  StatusOr<Region> AllocateRegion(size_t bytes) override;
  // address: "host:port"; port 0 picks a free one (see listen_port()).
  Status Listen(const std::string& address,
                std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept) override;
  StatusOr<std::shared_ptr<Connection>> Connect(const std::string& address,
                                                ConnectionHandlers handlers) override;
  int listen_port() const override;
  // Pending connections cost an endpoint and at most a few max_bytes
  // messages each, no thread: the delivery thread admits or refuses them.
  // Its refused peers do not learn it from UCX at once (a forced close
  // sends nothing): they see no answer, as from a dead peer.
  Status SetFirstMessageGate(FirstMessageGate gate) override;
  std::map<std::string, int64_t> refusals() const override;
  bool close_fences_peer_writes() const override { return false; }

  struct Impl;

 private:
  explicit UcxTransport(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::transfer
