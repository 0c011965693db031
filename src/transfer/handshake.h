// The first exchange on every prefill<->decode connection: each side sends
// Hello{role, layout fingerprint, weights identity, instance ids}; a
// connection whose layouts differ (page size, or any registered buffer's
// name, dtype or bytes per token — e.g. fp8 index-K on one side and bf16 on
// the other) or whose weights differ (same shapes, other values: f16 and
// q8_0 files of one model; or one metadata value, such as an edited
// rope.freq_base) is refused by both sides before a page moves, and so is
// one whose numerics differ (Hello.numerics), unless both allow it.
#pragma once

#include <algorithm>
#include <chrono>

#include "transfer/messages.h"

namespace tandem::transfer {

// OK when `theirs` may exchange pages with `mine`; otherwise
// FailedPrecondition saying exactly which part of the layout, or which parts
// of the weights identity, differ. Numerics that differ (another build's
// kernels: invariant 9) are refused too, naming both, unless
// `allow_mixed_numerics` (a rolling upgrade, whose outputs then equal no
// colocated run exactly: the oracle judges them as drift).
Status CheckHello(const Hello& mine, const Hello& theirs, bool allow_mixed_numerics = false);

// A random, non-zero id for this engine process (a restarted engine is a new peer).
uint64_t NewInstanceId();

// How often each side of a link says it is alive, for a peer that declares
// it dead after `peer_timeout` of silence: five beats per timeout, 20 ms at least.
inline std::chrono::milliseconds HeartbeatInterval(std::chrono::milliseconds peer_timeout) {
  return std::max(std::chrono::milliseconds(20), peer_timeout / 5);
}

}  // namespace tandem::transfer
