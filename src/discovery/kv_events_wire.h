// KV events on the wire, in vLLM's schema (vllm/distributed/kv_events.py) so
// routers built for it can read tandem's: a ZeroMQ PUB message of three
// frames [topic, sequence number (8 bytes, big-endian), payload], the
// payload a msgpack array [timestamp (float seconds), [events...]] where an
// event is an array led by its kind:
//   ["BlockStored", [keys...], parent key or nil, [token ids...], block size, lora id (nil), medium]
//   ["BlockRemoved", [keys...], medium]
//   ["AllBlocksCleared"]
// Keys are the chain keys of common/chain_key.h (uint64); tandem's block size
// is its page (64 tokens); medium is "device" (the engine's page pool),
// "host" or "disk" (its tiers).
//
// Decoding checks every size and type and refuses, with the reason, what is
// not this schema (unknown kinds are skipped: a newer publisher may add some).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem::discovery {

struct KvEvent {
  enum class Kind { kStored, kRemoved, kCleared } kind = Kind::kStored;
  std::vector<uint64_t> keys;
  bool has_parent = false;  // kStored: false for a chain that starts a prompt
  uint64_t parent = 0;
  std::vector<int32_t> tokens;  // kStored: block_size per key
  int64_t block_size = 0;
  std::string medium;
};

struct KvEventBatch {
  double ts = 0;
  std::vector<KvEvent> events;
};

std::string EncodeKvEventBatch(const KvEventBatch& batch);
// Refuses more than max_items keys and tokens in all, and any container that
// declares more elements than the payload could hold; keep_tokens false
// leaves BlockStored's tokens out (placement needs only the keys).
StatusOr<KvEventBatch> DecodeKvEventBatch(const std::string& payload, size_t max_items = size_t(1) << 20,
                                          bool keep_tokens = true);

std::string EncodeSequence(int64_t seq);                  // 8 bytes, big-endian
StatusOr<int64_t> DecodeSequence(const std::string& frame);  // exactly 8 bytes

}  // namespace tandem::discovery
