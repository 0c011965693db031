// The first exchange on every prefill<->decode connection: each side sends
// Hello{role, layout fingerprint, engine id}; a connection whose layouts
// differ (page size, or any registered buffer's name, dtype or bytes per
// token — e.g. fp8 index-K on one side and bf16 on the other) is refused
// before a single page moves.
#pragma once

#include "transfer/messages.h"

namespace tandem::transfer {

// OK when `theirs` may exchange pages with `mine`; otherwise
// FailedPrecondition saying exactly which part of the layout differs.
Status CheckHello(const Hello& mine, const Hello& theirs);

}  // namespace tandem::transfer
