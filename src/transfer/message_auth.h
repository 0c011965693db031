// Every message after the Hellos is authenticated (invariant 7). The two
// Hellos give a connection its session: a key derived from the cluster key
// and both sides' fresh nonces. Each later message carries, after its framed
// bytes, a sequence number (one counter per direction, from 1) and an
// HMAC-SHA256 under the session key over the direction, the sequence number
// and the message. The receiver takes only the next number in order, so a
// message cannot be forged (Commit, Abort, AbortAck, Destination...),
// replayed, reordered, dropped silently or moved to another connection.
// Without a cluster key (an insecure deployment, asked for by name) messages
// pass unchanged.
//
// Thread safety: SealAndSend may be called from any thread (one lock orders
// sealing with sending); Open from the connection's one receiving thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "transfer/cluster_key.h"
#include "transfer/transport.h"

namespace tandem::transfer {

class MessageAuth {
 public:
  static constexpr size_t kTrailerBytes = 8 + 32;  // sequence number, MAC

  MessageAuth() = default;  // no key: messages pass unchanged
  // `decode_side`: this side is the decode engine (it sends "decode->prefill").
  MessageAuth(const ClusterKey& key, std::span<const uint8_t> decode_nonce, std::span<const uint8_t> prefill_nonce,
              bool decode_side);

  bool enabled() const { return session_.enabled(); }
  // Seals `message` and sends it on `connection`, in sealing order.
  Status SealAndSend(Connection& connection, std::vector<uint8_t> message) EXCLUDES(send_mu_);
  // Checks and strips the trailer of a received message; FailedPrecondition
  // saying why when it is not the next authentic message of the peer.
  Status Open(std::vector<uint8_t>* message);

 private:
  ClusterKey session_;
  bool decode_side_ = false;
  Mutex send_mu_;
  uint64_t sent_ GUARDED_BY(send_mu_) = 0;
  uint64_t received_ = 0;  // the receiving thread's
};

}  // namespace tandem::transfer

namespace tandem::transfer {

// `inner` with every Send sealed by `auth`; everything else passes through.
std::shared_ptr<Connection> SealedConnection(std::shared_ptr<Connection> inner, std::shared_ptr<MessageAuth> auth);

// True when `message` is a whole unsealed Heartbeat: what a peer may still
// send before it has the session (its Hello answer was on the way), and
// nothing else after the Hellos is taken unsealed.
bool IsUnsealedHeartbeat(std::span<const uint8_t> message);

}  // namespace tandem::transfer
