// Which transport carries a deployment's handoffs (--transport):
//   auto  UCX, with whatever it finds (UCX_TLS honoured): shared memory and
//         CMA on one host;
//   shm   UCX with shared memory for the puts (one host);
//   tcp   plain TCP streams (transfer/socket.h): across hosts, or where
//         shared memory is not wanted.
// Both ends of a link must use the same kind: the remote keys differ.
#pragma once

#include <memory>
#include <string>

#include "transfer/transport.h"

namespace tandem::transfer {

enum class TransportKind { kAuto, kShm, kTcp };

StatusOr<TransportKind> ParseTransportKind(const std::string& name);  // "auto" | "shm" | "tcp"
// The wire family a kind speaks, as addresses and discovery records name it:
// "tcp" (plain streams) or "ucx" (auto and shm: one family, one address form).
const char* TransportFamily(TransportKind kind);
// knock: ClusterKey::Knock() (0: none), for the UCX kinds (transfer/ucx.h).
StatusOr<std::unique_ptr<Transport>> MakeTransport(TransportKind kind, uint64_t knock = 0);

}  // namespace tandem::transfer
