// The transport interface the handoff is written against: one-sided writes
// into a peer's registered memory, a flush that says when they have landed,
// and reliable ordered messages. Implementations: loopback (in-process, for
// tests), UCX (shared memory or TCP) and TCP sockets; the fault library's
// faulty connection (faults/faulty_connection.h) wraps any of them.
//
// Ordering contract — the one the handoff's correctness rests on: messages
// are ordered among themselves, but NOTHING orders a message after earlier
// Puts. Only Flush does. A sender that wants "commit after all bytes" must
// Flush, then Send (invariant 2).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::transfer {

using Clock = std::chrono::steady_clock;

// What a peer needs to write into a region: an opaque key and the region's size.
struct RemoteKey {
  std::vector<uint8_t> blob;
  uint64_t size = 0;
};

// Memory that peers may write into. The transport allocates it (UCX maps it
// itself so that one-sided puts stay one-sided on shared memory).
struct Region {
  uint8_t* data = nullptr;
  size_t size = 0;
  RemoteKey key;
};

class Connection;

// One write of a PutMany: [src, src + bytes) to byte `offset` of the region.
struct PutOp {
  const void* src = nullptr;
  size_t bytes = 0;
  uint64_t offset = 0;
};

// Merges each op into the one before it where both the source bytes and the
// destination offsets continue it (adjacent pages on both sides), in place;
// returns the new count. The merged ops write exactly the same bytes.
size_t CoalescePuts(std::span<PutOp> ops);

struct ConnectionHandlers {
  // Called on the transport's progress thread, one message at a time, in order.
  std::function<void(Connection&, std::vector<uint8_t>)> on_message;
  // Called once when the connection is gone, with why: Aborted when this side
  // closed it; DeadlineExceeded when the peer stopped answering (it may be
  // alive); NotFound when it was never made (nothing listens there);
  // Unavailable when the peer closed it or died.
  std::function<void(Connection&, const Status&)> on_close;
  // Where this side does the receiving (TCP): a put from the peer lands only
  // if this says yes for its offset and length in the region it names (null:
  // any put inside a region this transport allocated); otherwise the
  // connection closes and nothing of the put lands. Called on the reader thread.
  std::function<bool(Connection&, uint64_t offset, uint64_t bytes)> accept_put;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual uint64_t id() const = 0;
  // Posts a one-sided write of [src, src + bytes) to the peer's region named by
  // `key`, at byte `offset`. Returns once posted; the bytes land later.
  // REQUIRES: src stays unchanged until a Flush covering it returns OK, and
  // allocated until then or, when no Flush succeeds, until WaitReleased
  // returns true after Close: a failed Flush does not stop the transport
  // reading it. (Bytes changed after a failed Flush may land changed; a
  // handoff is never committed without a confirmed Flush, so none is read.)
  virtual Status Put(const void* src, size_t bytes, const RemoteKey& key, uint64_t offset) = 0;
  // Several puts into one region, exactly as that many Put calls in order
  // (transports may post them more cheaply); stops at the first error.
  virtual Status PutMany(std::span<const PutOp> ops, const RemoteKey& key) {
    for (const PutOp& op : ops) TANDEM_RETURN_IF_ERROR(Put(op.src, op.bytes, key, op.offset));
    return Status::Ok();
  }
  // Returns OK when every Put posted so far on this connection has landed at
  // the peer; DeadlineExceeded at `deadline`; Unavailable if the connection broke.
  virtual Status Flush(Clock::time_point deadline) = 0;
  // Reliable and ordered with respect to other messages (not to Puts).
  virtual Status Send(std::vector<uint8_t> message) = 0;
  virtual bool alive() const = 0;
  // After Close returns no new Put, Send or Flush is accepted. Whether a put
  // posted earlier can still land at the peer is what WaitReleased answers;
  // whether the peer's can still land here, Transport::close_fences_peer_writes().
  virtual void Close() = 0;
  // After Close: true once nothing this side posted on the connection can
  // still land at the peer (every put completed or was cancelled); false at
  // `deadline` (pass now() to ask without waiting), and always before Close.
  virtual bool WaitReleased(Clock::time_point deadline) = 0;
};

// What a listener spends on a peer before it has proven anything: a peer's
// first message is read with no thread and no buffer of its own beyond
// max_bytes, within `deadline`, and at most max_pending peers wait at once
// (more are refused at once). `check` decides on that first message (the
// decode engine's Hello proves the cluster key); a refusal may answer with
// `reply` (a few bytes, written best-effort) before the connection closes.
// Past any limit: refused, closed, counted, and logged (the first time, then
// at every power of two).
struct FirstMessageGate {
  size_t max_bytes = size_t(64) << 10;
  std::chrono::milliseconds deadline{5000};
  int max_pending = 128;
  std::function<Status(std::span<const uint8_t> message, std::vector<uint8_t>* reply)> check;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual StatusOr<Region> AllocateRegion(size_t bytes) = 0;
  // Accepts connections at `address`; on_accept returns the new connection's handlers.
  virtual Status Listen(const std::string& address,
                        std::function<ConnectionHandlers(std::shared_ptr<Connection>)> on_accept) = 0;
  virtual StatusOr<std::shared_ptr<Connection>> Connect(const std::string& address,
                                                        ConnectionHandlers handlers) = 0;
  // The port Listen bound (port 0 picks one); -1 before Listen, or for a
  // transport without ports.
  virtual int listen_port() const = 0;
  // Before Listen: gate every accepted connection's first message. Transports
  // that cannot (loopback: in-process) return FailedPrecondition, and the
  // caller says so.
  virtual Status SetFirstMessageGate(FirstMessageGate gate) {
    return FailedPrecondition("the " + name() + " transport does not gate unauthenticated peers");
  }
  // Peers the gate refused so far, by kind of reason (the reason without
  // its numbers); empty without a gate.
  virtual std::map<std::string, int64_t> refusals() const { return {}; }
  // True when closing a connection is a fence on this side: once Close()
  // returns, nothing the peer sent can land in our regions (we do the
  // receiving). False when the peer writes into our memory itself (shared
  // memory): then only the peer closing its end, or proving in a new
  // handshake that its old writes stopped, frees pages it may write.
  virtual bool close_fences_peer_writes() const = 0;
};

}  // namespace tandem::transfer
