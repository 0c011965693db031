#include "transfer/message_auth.h"

#include <array>
#include <cstring>
#include <string>

#include "transfer/messages.h"

namespace tandem::transfer {
namespace {

constexpr std::string_view kDecodeToPrefill = "decode->prefill";
constexpr std::string_view kPrefillToDecode = "prefill->decode";

std::array<uint8_t, 8> Le(uint64_t v) {
  std::array<uint8_t, 8> out;
  for (size_t i = 0; i < 8; ++i) out[i] = uint8_t(v >> (8 * i));
  return out;
}

}  // namespace

MessageAuth::MessageAuth(const ClusterKey& key, std::span<const uint8_t> decode_nonce,
                         std::span<const uint8_t> prefill_nonce, bool decode_side)
    : decode_side_(decode_side) {
  if (!key.enabled()) return;
  session_ = ClusterKey::FromBytes(key.Prove("session", {decode_nonce, prefill_nonce}));
}

Status MessageAuth::SealAndSend(Connection& connection, std::vector<uint8_t> message) {
  MutexLock lock(send_mu_);
  if (enabled()) {
    const auto seq = Le(++sent_);
    const std::vector<uint8_t> mac =
        session_.Prove(decode_side_ ? kDecodeToPrefill : kPrefillToDecode, {seq, message});
    message.insert(message.end(), seq.begin(), seq.end());
    message.insert(message.end(), mac.begin(), mac.end());
  }
  return connection.Send(std::move(message));
}

Status MessageAuth::Open(std::vector<uint8_t>* message) {
  if (!enabled()) return Status::Ok();
  if (message->size() < kTrailerBytes) {
    return FailedPrecondition("a message without its authentication (" + std::to_string(message->size()) + " bytes)");
  }
  const size_t body = message->size() - kTrailerBytes;
  uint64_t seq = 0;
  for (size_t i = 0; i < 8; ++i) seq |= uint64_t((*message)[body + i]) << (8 * i);
  const std::span<const uint8_t> bytes(message->data(), body);
  const std::span<const uint8_t> seq_bytes(message->data() + body, 8);
  const std::span<const uint8_t> mac(message->data() + body + 8, 32);
  if (!session_.Verify(decode_side_ ? kPrefillToDecode : kDecodeToPrefill, {seq_bytes, bytes}, mac)) {
    return FailedPrecondition("a message whose authentication does not verify (forged, altered, or from another "
                              "connection)");
  }
  if (seq != received_ + 1) {
    return FailedPrecondition("message number " + std::to_string(seq) + " where " + std::to_string(received_ + 1) +
                              " was due (replayed or reordered)");
  }
  received_ = seq;
  message->resize(body);
  return Status::Ok();
}

}  // namespace tandem::transfer

namespace tandem::transfer {
namespace {

class Sealed final : public Connection {
 public:
  Sealed(std::shared_ptr<Connection> inner, std::shared_ptr<MessageAuth> auth)
      : inner_(std::move(inner)), auth_(std::move(auth)) {}
  uint64_t id() const override { return inner_->id(); }
  Status Put(const void* src, size_t bytes, const RemoteKey& key, uint64_t offset) override {
    return inner_->Put(src, bytes, key, offset);
  }
  Status PutMany(std::span<const PutOp> ops, const RemoteKey& key) override { return inner_->PutMany(ops, key); }
  Status Flush(Clock::time_point deadline) override { return inner_->Flush(deadline); }
  Status Send(std::vector<uint8_t> message) override { return auth_->SealAndSend(*inner_, std::move(message)); }
  bool alive() const override { return inner_->alive(); }
  void Close() override { inner_->Close(); }
  bool WaitReleased(Clock::time_point deadline) override { return inner_->WaitReleased(deadline); }

 private:
  const std::shared_ptr<Connection> inner_;
  const std::shared_ptr<MessageAuth> auth_;
};

}  // namespace

std::shared_ptr<Connection> SealedConnection(std::shared_ptr<Connection> inner, std::shared_ptr<MessageAuth> auth) {
  return std::make_shared<Sealed>(std::move(inner), std::move(auth));
}

bool IsUnsealedHeartbeat(std::span<const uint8_t> message) {
  auto type = PeekType(message);
  return type.ok() && *type == MessageType::kHeartbeat;
}

}  // namespace tandem::transfer
