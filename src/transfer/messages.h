// The handoff wire messages (docs/handoff-wire-format.md): what a prefill and
// a decode engine say to each other to move one request's cache.
//
// Every message is a 12-byte header {magic "TDHO", version, type, body_length}
// followed by the body, all little-endian. Encoding is canonical: fixed-width
// integers and length-prefixed strings/arrays, no padding, no optional fields,
// so a message that decodes re-encodes to the same bytes.
//
// Decoding reads untrusted bytes (invariant 6): every length and count is
// checked against the bytes that remain and against a cap, trailing bytes are
// rejected, and any malformed message yields DataLoss naming the message and
// field. Decode never crashes, over-reads, or allocates more than the input
// could describe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/sampling_params.h"

namespace tandem {

constexpr uint32_t kHandoffMagic = 0x4F484454;  // bytes "TDHO" read as little-endian u32
constexpr uint16_t kHandoffVersion = 8;  // 5: authenticated messages (transfer/message_auth.h), Hello.target; 6: Hello.numerics, Commit.queue_us; 7: Destination.cache_salt; 8: Abort.code
constexpr size_t kHandoffHeaderBytes = 12;

// Decoding caps. A message beyond any of them is rejected before allocating.
constexpr uint32_t kMaxHandoffBodyBytes = 1u << 28;
constexpr uint32_t kMaxHandoffPages = 1u << 24;
constexpr uint32_t kMaxHandoffTokens = 1u << 24;
constexpr uint32_t kMaxHandoffBuffers = 64;
constexpr uint32_t kMaxHandoffStringBytes = 1u << 20;  // strings and opaque blobs

enum class MessageType : uint16_t {
  kHello = 1,
  kDestination = 2,
  kCommit = 3,
  kAbort = 4,
  kAbortAck = 5,
  kHeartbeat = 6,
};

const char* MessageTypeName(MessageType type);

struct MessageHeader {
  MessageType type = MessageType::kHello;
  uint32_t body_length = 0;
};

// Reads the header alone (for stream framing: the frame is
// kHandoffHeaderBytes + body_length bytes). Checks magic, version, type and
// the body cap; does not look at what follows the header.
StatusOr<MessageHeader> DecodeHeader(std::span<const uint8_t> bytes);
// The type of one whole framed message: the header is valid and body_length
// equals exactly the bytes after it. Use to dispatch to T::Decode.
StatusOr<MessageType> PeekType(std::span<const uint8_t> bytes);

// First message on a connection, both directions. A layout fingerprint or
// weights identity mismatch fails the connection on both sides
// (transfer/handshake.h). Instance ids are random per engine process, so a
// restarted engine is a new peer; the prefill side's answer names the decode
// instance it answers (peer_instance_id), the decode side's first Hello has 0.
struct Hello {
  static constexpr MessageType kType = MessageType::kHello;
  std::string role;  // "prefill" | "decode"; anything else is rejected
  std::string layout_fingerprint;
  std::string weights_identity;  // model/model.h: WeightsIdentity()
  uint64_t instance_id = 0;      // the sender's; never 0
  uint64_t peer_instance_id = 0;  // the receiver's, when known
  // The cluster key's handshake (transfer/cluster_key.h): the sender's fresh
  // nonce and its proof; both empty without a key. At most 64 bytes each.
  std::vector<uint8_t> nonce, proof;
  // The decode side's: the address it dialed, covered by its proof, so a Hello
  // captured on its way to one prefill engine is refused by another. At most
  // 256 bytes; empty from the prefill side.
  std::string target;
  // What decides a cache row's bits besides the layout and the weights: the
  // numerics identity's version and kernel variant (model/numerics.h,
  // NumericsIdentity::HandshakeFingerprint), a keyed fingerprint. At most 256 bytes.
  std::string numerics;

  std::vector<uint8_t> Encode() const;
  static StatusOr<Hello> Decode(std::span<const uint8_t> bytes);
  bool operator==(const Hello&) const = default;
};

// A decode page reserved for a handoff, with the generation it had when
// reserved, so a write aimed at a page since freed and reused is detectable.
struct PageRef {
  int32_t page = 0;  // >= 0
  uint32_t generation = 0;
  bool operator==(const PageRef&) const = default;
};

// Either direction, every heartbeat interval: a peer silent (no message of
// any kind) past the peer timeout is declared dead and its endpoint closed.
struct Heartbeat {
  static constexpr MessageType kType = MessageType::kHeartbeat;
  uint64_t instance_id = 0;  // the sender's

  std::vector<uint8_t> Encode() const;
  static StatusOr<Heartbeat> Decode(std::span<const uint8_t> bytes);
  bool operator==(const Heartbeat&) const = default;
};

// Decode -> prefill: where to write the request's cache.
// Decode checks: 0 <= skip_tokens <= tokens.size(), and pages covers exactly
// the prompt's pages from the one holding skip_tokens to the last one:
// pages.size() == ceil(tokens.size() / kPageTokens) - skip_tokens / kPageTokens.
// A handoff is named by (decode_instance_id, handoff_id): the sequence number
// is unique within one decode process, the instance id across processes and
// restarts. The prefill side also keys it by the connection it came on.
struct Destination {
  static constexpr MessageType kType = MessageType::kDestination;
  uint64_t handoff_id = 0;
  uint64_t decode_instance_id = 0;
  int64_t skip_tokens = 0;  // prefix already cached at decode; prefill does not send it
  std::vector<int32_t> tokens;  // the full prompt
  std::vector<PageRef> pages;   // cover [skip_tokens, tokens.size())
  std::vector<uint8_t> remote_key;  // the transport's opaque remote-memory key
  int64_t pool_pages = 0;           // pages in the decode pool: segment offsets depend on it
  // Milliseconds the prefill side has, from receipt, to commit (a relative
  // budget, so the engines' clocks need not agree). A queued handoff past it
  // is dropped with an Abort; a running one stops at its next layer.
  int64_t time_budget_ms = 0;
  SamplingParams sampling;          // the prefill side samples the first token with these
  // The request's tenant (common/chain_key.h, CacheRoot): the prefill side
  // finds and keeps the prompt's pages under it, never under another's.
  uint64_t cache_salt = 0;
  // MAC("destination", prefill nonce, handoff_id, remote_key) under the
  // cluster key (transfer/cluster_key.h); empty without one. At most 64 bytes.
  std::vector<uint8_t> auth;

  std::vector<uint8_t> Encode() const;
  static StatusOr<Destination> Decode(std::span<const uint8_t> bytes);
  bool operator==(const Destination&) const = default;
};

// Digest of one registered buffer's bytes of a request (transfer/checksum.h).
struct BufferDigest {
  std::string name;
  uint64_t xxh3 = 0;
  uint64_t bytes = 0;
  bool operator==(const BufferDigest&) const = default;
};

// Prefill -> decode, sent only after the transport has flushed every write
// (invariant 2). The only message that makes the request runnable at decode.
struct Commit {
  static constexpr MessageType kType = MessageType::kCommit;
  uint64_t handoff_id = 0;
  // PagesDigest(destination.pages): the commit names the very reservation
  // (pages and their generations) it filled; any other is refused.
  uint64_t pages_digest = 0;
  int32_t first_token = 0;
  std::vector<BufferDigest> digests;  // one per registered buffer, registry order
  uint64_t compute_us = 0;            // prefill side: forward passes of this prompt
  uint64_t transfer_us = 0;           // prefill side: writes after the last layer + the flush
  uint64_t queue_us = 0;              // prefill side: destination taken until its first layer was written

  std::vector<uint8_t> Encode() const;
  static StatusOr<Commit> Decode(std::span<const uint8_t> bytes);
  bool operator==(const Commit&) const = default;
};

// Why a handoff was aborted, for programs (the text is for people). Today
// the decode side places an aborted handoff again whatever the code and
// names the code in the request's error (decode/prefill_links.cc); tests and
// logs match codes, not text.
enum class AbortCode : uint16_t {
  kRefused = 1,     // prefill: the destination was not acceptable (authentication, pages, pool)
  kQueueFull = 2,   // prefill: its queue of handoffs is full; another engine may take it
  kDeadline = 3,    // the request's time budget ran out
  kStopping = 4,    // the side that aborts is stopping or draining
  kFailed = 5,      // the side that aborts failed the request (computing, writing, an error)
  kCancelled = 6,   // decode: the request is no longer wanted (client, deadline, drain)
  kLinkFailed = 7,  // decode: sending the destination failed
};
inline constexpr uint16_t kMaxAbortCode = 7;
// "refused", "queue-full", "deadline", "stopping", "failed", "cancelled", "link-failed".
const char* AbortCodeName(AbortCode code);

// Either direction, any time. The receiver answers AbortAck once no write of
// its own into the peer's pages can still land.
struct Abort {
  static constexpr MessageType kType = MessageType::kAbort;
  uint64_t handoff_id = 0;
  AbortCode code = AbortCode::kFailed;
  std::string reason;

  std::vector<uint8_t> Encode() const;
  static StatusOr<Abort> Decode(std::span<const uint8_t> bytes);
  bool operator==(const Abort&) const = default;
};

struct AbortAck {
  static constexpr MessageType kType = MessageType::kAbortAck;
  uint64_t handoff_id = 0;

  std::vector<uint8_t> Encode() const;
  static StatusOr<AbortAck> Decode(std::span<const uint8_t> bytes);
  bool operator==(const AbortAck&) const = default;
};

// XXH3 of the (page, generation) list, in order.
uint64_t PagesDigest(std::span<const PageRef> pages);

// Encode() REQUIRES every count and string within the caps above (a larger
// message is a programming error, checked).

}  // namespace tandem
