#include "transfer/messages.h"

#include <bit>

#include <type_traits>

#include <xxhash.h>

#include "cache/layout.h"

namespace tandem {
namespace {

// Appends little-endian fields to a message, header first; Finish() patches
// the body length in.
class MessageWriter {
 public:
  explicit MessageWriter(MessageType type) {
    Put(kHandoffMagic);
    Put(kHandoffVersion);
    Put(uint16_t(type));
    Put(uint32_t(0));  // body_length, patched by Finish()
  }

  template <typename T>
  void Put(T value) {
    static_assert(std::is_integral_v<T>);
    using U = std::make_unsigned_t<T>;
    const U u = U(value);
    for (size_t i = 0; i < sizeof(T); ++i) bytes_.push_back(uint8_t(u >> (8 * i)));
  }
  void PutFloat(float value) { Put(std::bit_cast<uint32_t>(value)); }
  void PutCount(size_t count, uint32_t cap) {
    TANDEM_CHECK_MSG(count <= cap, "handoff message field over its cap");
    Put(uint32_t(count));
  }
  void PutBytes(std::span<const uint8_t> data) {
    PutCount(data.size(), kMaxHandoffStringBytes);
    bytes_.insert(bytes_.end(), data.begin(), data.end());
  }
  void PutString(const std::string& s) {
    PutBytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  }

  std::vector<uint8_t> Finish() && {
    const size_t body = bytes_.size() - kHandoffHeaderBytes;
    TANDEM_CHECK_MSG(body <= kMaxHandoffBodyBytes, "handoff message body over its cap");
    for (size_t i = 0; i < 4; ++i) bytes_[8 + i] = uint8_t(body >> (8 * i));
    return std::move(bytes_);
  }

 private:
  std::vector<uint8_t> bytes_;
};

// Reads fields of one message body. The first failure is sticky: later reads
// return zero/empty and read nothing, so decoders read straight through and
// check Finish() once. Nothing is allocated before its size is known to fit
// in the bytes that remain.
class BodyReader {
 public:
  BodyReader(std::span<const uint8_t> body, MessageType type) : rest_(body), type_(type) {}

  template <typename T>
  T Get(const char* field) {
    static_assert(std::is_integral_v<T>);
    if (!Take(field, sizeof(T))) return T(0);
    std::make_unsigned_t<T> u = 0;
    for (size_t i = 0; i < sizeof(T); ++i) u |= std::make_unsigned_t<T>(rest_[i]) << (8 * i);
    rest_ = rest_.subspan(sizeof(T));
    return T(u);
  }

  float GetFloat(const char* field) { return std::bit_cast<float>(Get<uint32_t>(field)); }

  // A u32 element count, checked against `cap` and against the bytes left
  // (each element takes at least `min_element_bytes`).
  uint32_t Count(const char* field, uint32_t cap, size_t min_element_bytes) {
    const uint32_t count = Get<uint32_t>(field);
    if (!status_.ok()) return 0;
    if (count > cap) {
      Fail(field, "count " + std::to_string(count) + " exceeds the limit " + std::to_string(cap));
      return 0;
    }
    if (count > rest_.size() / min_element_bytes) {
      Fail(field, "count " + std::to_string(count) + " needs at least " +
                      std::to_string(uint64_t(count) * min_element_bytes) + " bytes, " +
                      std::to_string(rest_.size()) + " remain");
      return 0;
    }
    return count;
  }

  std::vector<uint8_t> Bytes(const char* field) {
    const uint32_t n = Count(field, kMaxHandoffStringBytes, 1);
    std::vector<uint8_t> out(rest_.begin(), rest_.begin() + n);
    rest_ = rest_.subspan(n);
    return out;
  }
  std::string String(const char* field) {
    const uint32_t n = Count(field, kMaxHandoffStringBytes, 1);
    std::string out(reinterpret_cast<const char*>(rest_.data()), n);
    rest_ = rest_.subspan(n);
    return out;
  }

  void Fail(const char* field, const std::string& what) {
    if (status_.ok()) {
      status_ = DataLoss(std::string("handoff ") + MessageTypeName(type_) + " field '" + field +
                         "': " + what);
    }
  }
  bool ok() const { return status_.ok(); }

  // The status of every read so far; also rejects unread trailing bytes.
  Status Finish() {
    if (status_.ok() && !rest_.empty()) {
      status_ = DataLoss(std::string("handoff ") + MessageTypeName(type_) + ": " +
                         std::to_string(rest_.size()) + " trailing bytes after the last field");
    }
    return status_;
  }

 private:
  bool Take(const char* field, size_t n) {
    if (!status_.ok()) return false;
    if (rest_.size() < n) {
      Fail(field, "truncated (needs " + std::to_string(n) + " bytes, " +
                      std::to_string(rest_.size()) + " remain)");
      return false;
    }
    return true;
  }

  std::span<const uint8_t> rest_;
  MessageType type_;
  Status status_;
};

// Validates the frame and that it holds a message of type `expected`.
StatusOr<BodyReader> OpenBody(std::span<const uint8_t> bytes, MessageType expected) {
  TANDEM_ASSIGN_OR_RETURN(MessageType type, PeekType(bytes));
  if (type != expected) {
    return DataLoss(std::string("handoff message is a ") + MessageTypeName(type) + ", expected " +
                    MessageTypeName(expected));
  }
  return BodyReader(bytes.subspan(kHandoffHeaderBytes), type);
}

bool KnownType(uint16_t type) {
  return type >= uint16_t(MessageType::kHello) && type <= uint16_t(MessageType::kHeartbeat);
}

uint64_t PagesFor(uint64_t tokens) { return (tokens + kPageTokens - 1) / kPageTokens; }

}  // namespace

const char* MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kHello: return "Hello";
    case MessageType::kDestination: return "Destination";
    case MessageType::kCommit: return "Commit";
    case MessageType::kAbort: return "Abort";
    case MessageType::kAbortAck: return "AbortAck";
    case MessageType::kHeartbeat: return "Heartbeat";
  }
  return "?";
}

StatusOr<MessageHeader> DecodeHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() < kHandoffHeaderBytes) {
    return DataLoss("handoff message header truncated: " + std::to_string(bytes.size()) + " of " +
                    std::to_string(kHandoffHeaderBytes) + " bytes");
  }
  auto le = [&](size_t at, size_t n) {
    uint32_t v = 0;
    for (size_t i = 0; i < n; ++i) v |= uint32_t(bytes[at + i]) << (8 * i);
    return v;
  };
  if (le(0, 4) != kHandoffMagic) {
    return DataLoss("handoff message header: bad magic (not \"TDHO\")");
  }
  if (le(4, 2) != kHandoffVersion) {
    return DataLoss("handoff message header: version " + std::to_string(le(4, 2)) +
                    " is not supported (this build speaks " +
                    std::to_string(kHandoffVersion) + ")");
  }
  if (!KnownType(uint16_t(le(6, 2)))) {
    return DataLoss("handoff message header: unknown type " + std::to_string(le(6, 2)));
  }
  MessageHeader header{MessageType(le(6, 2)), le(8, 4)};
  if (header.body_length > kMaxHandoffBodyBytes) {
    return DataLoss("handoff message header: body_length " + std::to_string(header.body_length) +
                    " exceeds the limit " + std::to_string(kMaxHandoffBodyBytes));
  }
  return header;
}

StatusOr<MessageType> PeekType(std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(MessageHeader header, DecodeHeader(bytes));
  if (bytes.size() - kHandoffHeaderBytes != header.body_length) {
    return DataLoss(std::string("handoff ") + MessageTypeName(header.type) +
                    " header: body_length " + std::to_string(header.body_length) + " but " +
                    std::to_string(bytes.size() - kHandoffHeaderBytes) + " body bytes present");
  }
  return header.type;
}

std::vector<uint8_t> Hello::Encode() const {
  MessageWriter w(kType);
  w.PutString(role);
  w.PutString(layout_fingerprint);
  w.PutString(weights_identity);
  w.Put(instance_id);
  w.Put(peer_instance_id);
  w.PutBytes(nonce);
  w.PutBytes(proof);
  w.PutString(target);
  w.PutString(numerics);
  return std::move(w).Finish();
}

StatusOr<Hello> Hello::Decode(std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(BodyReader r, OpenBody(bytes, kType));
  Hello m;
  m.role = r.String("role");
  m.layout_fingerprint = r.String("layout_fingerprint");
  m.weights_identity = r.String("weights_identity");
  m.instance_id = r.Get<uint64_t>("instance_id");
  m.peer_instance_id = r.Get<uint64_t>("peer_instance_id");
  m.nonce = r.Bytes("nonce");
  m.proof = r.Bytes("proof");
  m.target = r.String("target");
  m.numerics = r.String("numerics");
  if (r.ok() && (m.nonce.size() > 64 || m.proof.size() > 64)) r.Fail("nonce", "a nonce or proof over 64 bytes");
  if (r.ok() && m.target.size() > 256) r.Fail("target", "an address over 256 bytes");
  if (r.ok() && m.numerics.size() > 256) r.Fail("numerics", "a numerics fingerprint over 256 bytes");
  if (r.ok() && m.role != "prefill" && m.role != "decode") {
    r.Fail("role", "'" + m.role.substr(0, 64) + "' is neither \"prefill\" nor \"decode\"");
  }
  if (r.ok() && m.instance_id == 0) r.Fail("instance_id", "0 is not an instance id");
  TANDEM_RETURN_IF_ERROR(r.Finish());
  return m;
}

std::vector<uint8_t> Destination::Encode() const {
  MessageWriter w(kType);
  w.Put(handoff_id);
  w.Put(decode_instance_id);
  w.Put(skip_tokens);
  w.PutCount(tokens.size(), kMaxHandoffTokens);
  for (int32_t t : tokens) w.Put(t);
  w.PutCount(pages.size(), kMaxHandoffPages);
  for (const PageRef& p : pages) {
    w.Put(p.page);
    w.Put(p.generation);
  }
  w.PutBytes(remote_key);
  w.Put(pool_pages);
  w.Put(time_budget_ms);
  w.PutFloat(sampling.temperature);
  w.Put(sampling.top_k);
  w.PutFloat(sampling.top_p);
  w.PutFloat(sampling.min_p);
  w.PutFloat(sampling.repetition_penalty);
  w.Put(sampling.repeat_last_n);
  w.Put(sampling.seed);
  w.PutFloat(sampling.frequency_penalty);
  w.PutFloat(sampling.presence_penalty);
  w.PutCount(sampling.logit_bias.size(), SamplingParams::kMaxLogitBias);
  for (const auto& [token, bias] : sampling.logit_bias) {
    w.Put(token);
    w.PutFloat(bias);
  }
  w.PutString(sampling.constraint);
  w.Put(sampling.answer_budget);
  w.Put(cache_salt);
  w.PutBytes(auth);
  return std::move(w).Finish();
}

bool Destination::operator==(const Destination& o) const {
  const SamplingParams& a = sampling;
  const SamplingParams& b = o.sampling;
  return handoff_id == o.handoff_id && decode_instance_id == o.decode_instance_id &&
         skip_tokens == o.skip_tokens && tokens == o.tokens && pages == o.pages &&
         remote_key == o.remote_key && pool_pages == o.pool_pages &&
         time_budget_ms == o.time_budget_ms && a == b && cache_salt == o.cache_salt && auth == o.auth;
}

StatusOr<Destination> Destination::Decode(std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(BodyReader r, OpenBody(bytes, kType));
  Destination m;
  m.handoff_id = r.Get<uint64_t>("handoff_id");
  m.decode_instance_id = r.Get<uint64_t>("decode_instance_id");
  m.skip_tokens = r.Get<int64_t>("skip_tokens");
  m.tokens.resize(r.Count("tokens", kMaxHandoffTokens, 4));
  for (int32_t& t : m.tokens) t = r.Get<int32_t>("tokens");
  m.pages.resize(r.Count("pages", kMaxHandoffPages, 8));
  for (PageRef& p : m.pages) {
    p.page = r.Get<int32_t>("pages.page");
    p.generation = r.Get<uint32_t>("pages.generation");
    if (r.ok() && p.page < 0) r.Fail("pages.page", "negative page " + std::to_string(p.page));
  }
  m.remote_key = r.Bytes("remote_key");
  m.pool_pages = r.Get<int64_t>("pool_pages");
  if (r.ok() && (m.pool_pages < 0 || m.pool_pages > int64_t(1) << 31)) {
    r.Fail("pool_pages", std::to_string(m.pool_pages) + " is out of range");
  }
  m.time_budget_ms = r.Get<int64_t>("time_budget_ms");
  if (r.ok() && (m.time_budget_ms < 1 || m.time_budget_ms > int64_t(24) * 3600 * 1000)) {
    r.Fail("time_budget_ms", std::to_string(m.time_budget_ms) + " is outside [1 ms, 24 h]");
  }
  m.sampling.temperature = r.GetFloat("sampling.temperature");
  m.sampling.top_k = r.Get<int32_t>("sampling.top_k");
  m.sampling.top_p = r.GetFloat("sampling.top_p");
  m.sampling.min_p = r.GetFloat("sampling.min_p");
  m.sampling.repetition_penalty = r.GetFloat("sampling.repetition_penalty");
  m.sampling.repeat_last_n = r.Get<int32_t>("sampling.repeat_last_n");
  m.sampling.seed = r.Get<uint64_t>("sampling.seed");
  m.sampling.frequency_penalty = r.GetFloat("sampling.frequency_penalty");
  m.sampling.presence_penalty = r.GetFloat("sampling.presence_penalty");
  m.sampling.logit_bias.resize(r.Count("sampling.logit_bias", SamplingParams::kMaxLogitBias, 8));
  for (auto& [token, bias] : m.sampling.logit_bias) {
    token = r.Get<int32_t>("sampling.logit_bias");
    bias = r.GetFloat("sampling.logit_bias");
  }
  m.sampling.constraint = r.String("sampling.constraint");
  m.sampling.answer_budget = r.Get<int32_t>("sampling.answer_budget");
  m.cache_salt = r.Get<uint64_t>("cache_salt");
  m.auth = r.Bytes("auth");
  if (r.ok() && m.auth.size() > 64) r.Fail("auth", std::to_string(m.auth.size()) + " bytes (at most 64)");
  if (r.ok()) {
    if (Status st = m.sampling.Validate(); !st.ok()) r.Fail("sampling", st.message());
  }
  if (r.ok() && (m.skip_tokens < 0 || uint64_t(m.skip_tokens) > m.tokens.size())) {
    r.Fail("skip_tokens", std::to_string(m.skip_tokens) + " is outside [0, " +
                              std::to_string(m.tokens.size()) + "]");
  }
  if (r.ok()) {
    const uint64_t want = PagesFor(m.tokens.size()) - uint64_t(m.skip_tokens) / kPageTokens;
    if (m.pages.size() != want) {
      r.Fail("pages", std::to_string(m.pages.size()) + " pages, but tokens [" +
                          std::to_string(m.skip_tokens) + ", " + std::to_string(m.tokens.size()) +
                          ") span " + std::to_string(want));
    }
  }
  TANDEM_RETURN_IF_ERROR(r.Finish());
  return m;
}

std::vector<uint8_t> Commit::Encode() const {
  MessageWriter w(kType);
  w.Put(handoff_id);
  w.Put(pages_digest);
  w.Put(first_token);
  w.PutCount(digests.size(), kMaxHandoffBuffers);
  for (const BufferDigest& d : digests) {
    w.PutString(d.name);
    w.Put(d.xxh3);
    w.Put(d.bytes);
  }
  w.Put(compute_us);
  w.Put(transfer_us);
  w.Put(queue_us);
  return std::move(w).Finish();
}

StatusOr<Commit> Commit::Decode(std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(BodyReader r, OpenBody(bytes, kType));
  Commit m;
  m.handoff_id = r.Get<uint64_t>("handoff_id");
  m.pages_digest = r.Get<uint64_t>("pages_digest");
  m.first_token = r.Get<int32_t>("first_token");
  if (r.ok() && m.first_token < 0) r.Fail("first_token", "negative token " + std::to_string(m.first_token));
  // Each digest is at least a 4-byte name length and two u64s.
  m.digests.resize(r.Count("digests", kMaxHandoffBuffers, 20));
  for (BufferDigest& d : m.digests) {
    d.name = r.String("digests.name");
    d.xxh3 = r.Get<uint64_t>("digests.xxh3");
    d.bytes = r.Get<uint64_t>("digests.bytes");
  }
  m.compute_us = r.Get<uint64_t>("compute_us");
  m.transfer_us = r.Get<uint64_t>("transfer_us");
  m.queue_us = r.Get<uint64_t>("queue_us");
  TANDEM_RETURN_IF_ERROR(r.Finish());
  return m;
}

const char* AbortCodeName(AbortCode code) {
  switch (code) {
    case AbortCode::kRefused: return "refused";
    case AbortCode::kQueueFull: return "queue-full";
    case AbortCode::kDeadline: return "deadline";
    case AbortCode::kStopping: return "stopping";
    case AbortCode::kFailed: return "failed";
    case AbortCode::kCancelled: return "cancelled";
    case AbortCode::kLinkFailed: return "link-failed";
  }
  return "unknown";
}

std::vector<uint8_t> Abort::Encode() const {
  MessageWriter w(kType);
  w.Put(handoff_id);
  w.Put(uint16_t(code));
  w.PutString(reason);
  return std::move(w).Finish();
}

StatusOr<Abort> Abort::Decode(std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(BodyReader r, OpenBody(bytes, kType));
  Abort m;
  m.handoff_id = r.Get<uint64_t>("handoff_id");
  const uint16_t code = r.Get<uint16_t>("code");
  if (r.ok() && (code < 1 || code > kMaxAbortCode)) r.Fail("code", std::to_string(code) + " is not an abort code");
  m.code = AbortCode(code);
  m.reason = r.String("reason");
  TANDEM_RETURN_IF_ERROR(r.Finish());
  return m;
}

std::vector<uint8_t> AbortAck::Encode() const {
  MessageWriter w(kType);
  w.Put(handoff_id);
  return std::move(w).Finish();
}

StatusOr<AbortAck> AbortAck::Decode(std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(BodyReader r, OpenBody(bytes, kType));
  AbortAck m;
  m.handoff_id = r.Get<uint64_t>("handoff_id");
  TANDEM_RETURN_IF_ERROR(r.Finish());
  return m;
}

std::vector<uint8_t> Heartbeat::Encode() const {
  MessageWriter w(kType);
  w.Put(instance_id);
  return std::move(w).Finish();
}

StatusOr<Heartbeat> Heartbeat::Decode(std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(BodyReader r, OpenBody(bytes, kType));
  Heartbeat m;
  m.instance_id = r.Get<uint64_t>("instance_id");
  TANDEM_RETURN_IF_ERROR(r.Finish());
  return m;
}

uint64_t PagesDigest(std::span<const PageRef> pages) {
  std::vector<uint8_t> bytes;
  bytes.reserve(pages.size() * 8);
  for (const PageRef& p : pages) {
    for (size_t i = 0; i < 4; ++i) bytes.push_back(uint8_t(uint32_t(p.page) >> (8 * i)));
    for (size_t i = 0; i < 4; ++i) bytes.push_back(uint8_t(p.generation >> (8 * i)));
  }
  return XXH3_64bits(bytes.data(), bytes.size());
}

}  // namespace tandem
