// transfer/message_auth.h: after the Hellos every message carries the next
// sequence number and a MAC under the connection's session; nothing forged,
// altered, replayed, reordered or from the other direction is opened.
#include "transfer/message_auth.h"

#include <gtest/gtest.h>


namespace tandem::transfer {
namespace {

// Captures what SealAndSend puts on the wire.
class Capture final : public Connection {
 public:
  uint64_t id() const override { return 1; }
  Status Put(const void*, size_t, const RemoteKey&, uint64_t) override { return Status::Ok(); }
  Status Flush(Clock::time_point) override { return Status::Ok(); }
  Status Send(std::vector<uint8_t> m) override {
    sent.push_back(std::move(m));
    return Status::Ok();
  }
  bool alive() const override { return true; }
  void Close() override {}
  bool WaitReleased(Clock::time_point) override { return true; }
  std::vector<std::vector<uint8_t>> sent;
};

struct Session {
  ClusterKey key = *ClusterKey::FromSecret("the cluster's shared secret");
  std::vector<uint8_t> nd = NewNonce(), np = NewNonce();
  MessageAuth decode{key, nd, np, true}, prefill{key, nd, np, false};
};

TEST(MessageAuth, OnlyTheNextAuthenticMessageOfThePeerOpens) {
  Session s;
  Capture wire;
  for (uint8_t i = 1; i <= 3; ++i) ASSERT_TRUE(s.prefill.SealAndSend(wire, {i, i, i}).ok());
  ASSERT_EQ(wire.sent.size(), 3u);
  EXPECT_EQ(wire.sent[0].size(), 3 + MessageAuth::kTrailerBytes);
  // Out of order: number 2 where 1 is due.
  auto second = wire.sent[1];
  EXPECT_NE(s.decode.Open(&second).message().find("replayed or reordered"), std::string::npos);
  auto first = wire.sent[0];
  ASSERT_TRUE(s.decode.Open(&first).ok());
  EXPECT_EQ(first, (std::vector<uint8_t>{1, 1, 1}));
  // Again: a replay.
  auto replay = wire.sent[0];
  EXPECT_FALSE(s.decode.Open(&replay).ok());
  // Altered in one bit: does not verify.
  auto altered = wire.sent[1];
  altered[0] ^= 1;
  EXPECT_NE(s.decode.Open(&altered).message().find("does not verify"), std::string::npos);
  second = wire.sent[1];
  ASSERT_TRUE(s.decode.Open(&second).ok());
  // Sent back in the other direction (reflected): does not verify.
  auto reflected = wire.sent[2];
  EXPECT_FALSE(s.prefill.Open(&reflected).ok());
  // Without the trailer, or under another connection's session: refused.
  std::vector<uint8_t> bare = {3, 3, 3};
  EXPECT_NE(s.decode.Open(&bare).message().find("without its authentication"), std::string::npos);
  Session other;
  auto elsewhere = wire.sent[2];
  EXPECT_FALSE(other.decode.Open(&elsewhere).ok());
  auto third = wire.sent[2];
  EXPECT_TRUE(s.decode.Open(&third).ok());
}

TEST(MessageAuth, WithoutAKeyMessagesPassUnchanged) {
  MessageAuth none;
  Capture wire;
  ASSERT_TRUE(none.SealAndSend(wire, {7}).ok());
  EXPECT_EQ(wire.sent[0], std::vector<uint8_t>{7});
  EXPECT_TRUE(none.Open(&wire.sent[0]).ok());
  EXPECT_EQ(wire.sent[0], std::vector<uint8_t>{7});
}

}  // namespace
}  // namespace tandem::transfer
