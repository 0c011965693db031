#include "transfer/messages.h"

#include <bit>
#include <concepts>

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

// ---- Each message's fields, listed once. ----
// Fields(m, f) names every field of a message in the order it travels: f(name,
// field) for a fixed-width integer, float, enum, string or byte string, and
// f.Array(name, vector, cap, min_bytes, each) for a counted array whose
// elements `each` lists. FieldWriter encodes them, FieldReader decodes them
// (the names go into its errors); Check(m, r) judges what was read. Equality is
// each struct's defaulted operator==, over the same members.
namespace {

template <typename M, typename T>
concept MessageOf = std::same_as<std::remove_const_t<M>, T>;

class FieldWriter {
 public:
  explicit FieldWriter(MessageType type) : w_(type) {}
  template <typename T>
  void operator()(const char*, const T& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      w_.PutString(v);
    } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
      w_.PutBytes(v);
    } else if constexpr (std::is_same_v<T, float>) {
      w_.PutFloat(v);
    } else if constexpr (std::is_enum_v<T>) {
      w_.Put(std::underlying_type_t<T>(v));
    } else {
      w_.Put(v);
    }
  }
  template <typename T, typename Each>
  void Array(const char*, const std::vector<T>& v, uint32_t cap, size_t, Each each) {
    w_.PutCount(v.size(), cap);
    for (const T& e : v) each(*this, e);
  }
  std::vector<uint8_t> Finish() && { return std::move(w_).Finish(); }

 private:
  MessageWriter w_;
};

class FieldReader {
 public:
  explicit FieldReader(BodyReader& r) : r_(r) {}
  template <typename T>
  void operator()(const char* name, T& v) {
    if constexpr (std::is_same_v<T, std::string>) {
      v = r_.String(name);
    } else if constexpr (std::is_same_v<T, std::vector<uint8_t>>) {
      v = r_.Bytes(name);
    } else if constexpr (std::is_same_v<T, float>) {
      v = r_.GetFloat(name);
    } else if constexpr (std::is_enum_v<T>) {
      v = T(r_.Get<std::underlying_type_t<T>>(name));
    } else {
      v = r_.Get<T>(name);
    }
  }
  // Nothing is allocated before the count is known to fit the bytes left.
  template <typename T, typename Each>
  void Array(const char* name, std::vector<T>& v, uint32_t cap, size_t min_bytes, Each each) {
    v.resize(r_.Count(name, uint32_t(cap), min_bytes));
    for (T& e : v) each(*this, e);
  }

 private:
  BodyReader& r_;
};

template <MessageOf<Hello> M, typename F>
void Fields(M& m, F& f) {
  f("role", m.role);
  f("layout_fingerprint", m.layout_fingerprint);
  f("weights_identity", m.weights_identity);
  f("instance_id", m.instance_id);
  f("peer_instance_id", m.peer_instance_id);
  f("nonce", m.nonce);
  f("proof", m.proof);
  f("target", m.target);
  f("numerics", m.numerics);
}

void Check(const Hello& m, BodyReader& r) {
  if (r.ok() && (m.nonce.size() > 64 || m.proof.size() > 64)) r.Fail("nonce", "a nonce or proof over 64 bytes");
  if (r.ok() && m.target.size() > 256) r.Fail("target", "an address over 256 bytes");
  if (r.ok() && m.numerics.size() > 256) r.Fail("numerics", "a numerics fingerprint over 256 bytes");
  if (r.ok() && m.role != "prefill" && m.role != "decode") {
    r.Fail("role", "'" + m.role.substr(0, 64) + "' is neither \"prefill\" nor \"decode\"");
  }
  if (r.ok() && m.instance_id == 0) r.Fail("instance_id", "0 is not an instance id");
}

template <MessageOf<Destination> M, typename F>
void Fields(M& m, F& f) {
  f("handoff_id", m.handoff_id);
  f("decode_instance_id", m.decode_instance_id);
  f("skip_tokens", m.skip_tokens);
  f.Array("tokens", m.tokens, kMaxHandoffTokens, 4, [](auto& g, auto& t) { g("tokens", t); });
  f.Array("pages", m.pages, kMaxHandoffPages, 8, [](auto& g, auto& p) {
    g("pages.page", p.page);
    g("pages.generation", p.generation);
  });
  f("remote_key", m.remote_key);
  f("pool_pages", m.pool_pages);
  f("time_budget_ms", m.time_budget_ms);
  auto& s = m.sampling;
  f("sampling.temperature", s.temperature);
  f("sampling.top_k", s.top_k);
  f("sampling.top_p", s.top_p);
  f("sampling.min_p", s.min_p);
  f("sampling.repetition_penalty", s.repetition_penalty);
  f("sampling.repeat_last_n", s.repeat_last_n);
  f("sampling.seed", s.seed);
  f("sampling.frequency_penalty", s.frequency_penalty);
  f("sampling.presence_penalty", s.presence_penalty);
  f.Array("sampling.logit_bias", s.logit_bias, SamplingParams::kMaxLogitBias, 8, [](auto& g, auto& e) {
    g("sampling.logit_bias", e.first);
    g("sampling.logit_bias", e.second);
  });
  f("sampling.constraint", s.constraint);
  f("sampling.answer_budget", s.answer_budget);
  f("cache_salt", m.cache_salt);
  f("auth", m.auth);
}

void Check(const Destination& m, BodyReader& r) {
  for (const PageRef& p : m.pages) {
    if (r.ok() && p.page < 0) r.Fail("pages.page", "negative page " + std::to_string(p.page));
  }
  if (r.ok() && (m.pool_pages < 0 || m.pool_pages > int64_t(1) << 31)) {
    r.Fail("pool_pages", std::to_string(m.pool_pages) + " is out of range");
  }
  if (r.ok() && (m.time_budget_ms < 1 || m.time_budget_ms > int64_t(24) * 3600 * 1000)) {
    r.Fail("time_budget_ms", std::to_string(m.time_budget_ms) + " is outside [1 ms, 24 h]");
  }
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
}

template <MessageOf<Commit> M, typename F>
void Fields(M& m, F& f) {
  f("handoff_id", m.handoff_id);
  f("pages_digest", m.pages_digest);
  f("first_token", m.first_token);
  // Each digest is at least a 4-byte name length and two u64s.
  f.Array("digests", m.digests, kMaxHandoffBuffers, 20, [](auto& g, auto& d) {
    g("digests.name", d.name);
    g("digests.xxh3", d.xxh3);
    g("digests.bytes", d.bytes);
  });
  f("compute_us", m.compute_us);
  f("transfer_us", m.transfer_us);
  f("queue_us", m.queue_us);
}

void Check(const Commit& m, BodyReader& r) {
  if (r.ok() && m.first_token < 0) r.Fail("first_token", "negative token " + std::to_string(m.first_token));
}

template <MessageOf<Abort> M, typename F>
void Fields(M& m, F& f) {
  f("handoff_id", m.handoff_id);
  f("code", m.code);
  f("reason", m.reason);
}

void Check(const Abort& m, BodyReader& r) {
  const uint16_t code = uint16_t(m.code);
  if (r.ok() && (code < 1 || code > kMaxAbortCode)) r.Fail("code", std::to_string(code) + " is not an abort code");
}

template <MessageOf<AbortAck> M, typename F>
void Fields(M& m, F& f) {
  f("handoff_id", m.handoff_id);
}

template <MessageOf<Heartbeat> M, typename F>
void Fields(M& m, F& f) {
  f("instance_id", m.instance_id);
}

void Check(const auto&, BodyReader&) {}  // AbortAck, Heartbeat: any value will do

// Reads a message of type M: its frame, its fields, then its checks.
template <typename M>
StatusOr<M> DecodeMessage(std::span<const uint8_t> bytes) {
  TANDEM_ASSIGN_OR_RETURN(BodyReader r, OpenBody(bytes, M::kType));
  M m;
  FieldReader f(r);
  Fields(m, f);
  if (r.ok()) Check(m, r);
  TANDEM_RETURN_IF_ERROR(r.Finish());
  return m;
}

template <typename M>
std::vector<uint8_t> EncodeMessage(const M& m) {
  FieldWriter f(M::kType);
  Fields(m, f);
  return std::move(f).Finish();
}

}  // namespace

std::vector<uint8_t> Hello::Encode() const { return EncodeMessage(*this); }
StatusOr<Hello> Hello::Decode(std::span<const uint8_t> bytes) { return DecodeMessage<Hello>(bytes); }
std::vector<uint8_t> Destination::Encode() const { return EncodeMessage(*this); }
StatusOr<Destination> Destination::Decode(std::span<const uint8_t> bytes) { return DecodeMessage<Destination>(bytes); }
std::vector<uint8_t> Commit::Encode() const { return EncodeMessage(*this); }
StatusOr<Commit> Commit::Decode(std::span<const uint8_t> bytes) { return DecodeMessage<Commit>(bytes); }
std::vector<uint8_t> Abort::Encode() const { return EncodeMessage(*this); }
StatusOr<Abort> Abort::Decode(std::span<const uint8_t> bytes) { return DecodeMessage<Abort>(bytes); }
std::vector<uint8_t> AbortAck::Encode() const { return EncodeMessage(*this); }
StatusOr<AbortAck> AbortAck::Decode(std::span<const uint8_t> bytes) { return DecodeMessage<AbortAck>(bytes); }
std::vector<uint8_t> Heartbeat::Encode() const { return EncodeMessage(*this); }
StatusOr<Heartbeat> Heartbeat::Decode(std::span<const uint8_t> bytes) { return DecodeMessage<Heartbeat>(bytes); }

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
