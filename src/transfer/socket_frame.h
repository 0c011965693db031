// The TCP transport's frame header (transfer/socket.h), shared by the
// connection code and the listener's gate for unauthenticated peers.
// Every frame starts with 32 bytes: type (u32), 0 (u32), a, b, length (u64),
// little-endian.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::transfer::socket_internal {

enum FrameType : uint32_t { kPutFrame = 1, kMessageFrame = 2, kFlushFrame = 3, kFlushAckFrame = 4 };
constexpr size_t kFrameHeaderBytes = 32;

struct Frame {
  uint32_t type = 0;
  uint64_t a = 0, b = 0, length = 0;
};

inline void PutLe(uint8_t* at, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) at[i] = uint8_t(v >> (8 * i));
}
inline uint64_t GetLe(const uint8_t* at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(at[i]) << (8 * i);
  return v;
}
inline Frame ParseFrameHeader(const uint8_t* h) {
  return Frame{uint32_t(GetLe(h, 4)), GetLe(h + 8, 8), GetLe(h + 16, 8), GetLe(h + 24, 8)};
}

}  // namespace tandem::transfer::socket_internal
