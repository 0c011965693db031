#include "transfer/transport.h"

namespace tandem::transfer {

size_t CoalescePuts(std::span<PutOp> ops) {
  size_t out = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (out > 0) {
      PutOp& last = ops[out - 1];
      if (static_cast<const uint8_t*>(last.src) + last.bytes == ops[i].src &&
          last.offset + last.bytes == ops[i].offset) {
        last.bytes += ops[i].bytes;
        continue;
      }
    }
    ops[out++] = ops[i];
  }
  return out;
}

}  // namespace tandem::transfer
