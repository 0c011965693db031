// The TCP transport on 127.0.0.1: puts land where they are aimed and a flush
// says when; messages keep their order; bad puts close the connection with a
// reason; closing is a fence; a refusal's last message still goes out; a
// connection to a port nobody listens on is reported as refused.
#include "transfer/socket.h"

#include "fakes/connection_inbox.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <mutex>

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;

using Inbox = testing::ConnectionInbox;

class SocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    region_ = *server_.AllocateRegion(kRegion);
    std::memset(region_.data, 0, kRegion);
    ASSERT_TRUE(server_
                    .Listen("127.0.0.1:0",
                            [this](std::shared_ptr<Connection> c) {
                              std::lock_guard<std::mutex> lock(accepted_mu_);
                              accepted_ = c;
                              accepted_cv_.notify_all();
                              return at_server_.Handlers();
                            })
                    .ok());
    auto c = client_.Connect("127.0.0.1:" + std::to_string(server_.listen_port()), at_client_.Handlers());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    conn_ = *c;
  }
  std::shared_ptr<Connection> Accepted() {
    std::unique_lock<std::mutex> lock(accepted_mu_);
    accepted_cv_.wait_for(lock, 10s, [&] { return accepted_ != nullptr; });
    return accepted_;
  }

  static constexpr size_t kRegion = size_t(1) << 20;
  Inbox at_server_, at_client_;     // before the transports: their threads write here until they are gone
  SocketTransport server_, client_;
  Region region_;
  std::shared_ptr<Connection> conn_;
  std::mutex accepted_mu_;
  std::condition_variable accepted_cv_;
  std::shared_ptr<Connection> accepted_;
};

TEST_F(SocketTest, PutsLandWhereAimedAfterAFlushAndMessagesKeepTheirOrder) {
  std::vector<uint8_t> src(kRegion);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 7 + 3);
  // 256 pages of 4 KiB, written to mirrored places.
  constexpr size_t kPage = 4096;
  for (size_t p = 0; p < 256; ++p) {
    ASSERT_TRUE(conn_->Put(src.data() + p * kPage, kPage, region_.key, (255 - p) * kPage).ok());
  }
  for (uint8_t m = 0; m < 20; ++m) ASSERT_TRUE(conn_->Send({m, uint8_t(m + 1)}).ok());
  ASSERT_TRUE(conn_->Flush(std::chrono::steady_clock::now() + 10s).ok());
  for (size_t p = 0; p < 256; ++p) {
    ASSERT_EQ(std::memcmp(region_.data + (255 - p) * kPage, src.data() + p * kPage, kPage), 0) << "page " << p;
  }
  ASSERT_TRUE(at_server_.WaitMessages(20));
  for (uint8_t m = 0; m < 20; ++m) EXPECT_EQ(at_server_.messages[m], (std::vector<uint8_t>{m, uint8_t(m + 1)}));
}

TEST_F(SocketTest, APutOutsideEveryRegionClosesTheConnectionWithTheReason) {
  RemoteKey lying = region_.key;
  lying.size = kRegion * 4;  // the key claims more than its owner announced
  std::vector<uint8_t> src(4096, 0xAB);
  ASSERT_TRUE(conn_->Put(src.data(), src.size(), lying, kRegion * 2).ok());
  EXPECT_FALSE(conn_->Flush(std::chrono::steady_clock::now() + 10s).ok());
  ASSERT_TRUE(at_server_.WaitClosed());
  EXPECT_NE(at_server_.why.message().find("outside every region"), std::string::npos) << at_server_.why.ToString();
  for (size_t i = 0; i < kRegion; ++i) ASSERT_EQ(region_.data[i], 0) << "nothing landed";
  conn_->Close();  // the flush failed: src is ours again only once the connection is released
  EXPECT_TRUE(conn_->WaitReleased(std::chrono::steady_clock::now() + 10s));
}

TEST_F(SocketTest, ClosingIsAFenceNothingLandsAfterItReturns) {
  auto mine = Accepted();
  ASSERT_NE(mine, nullptr);
  mine->Close();  // the receiving side closes first
  EXPECT_TRUE(server_.close_fences_peer_writes());
  std::vector<uint8_t> src(4096, 0xCD);
  for (int i = 0; i < 64; ++i) (void)conn_->Put(src.data(), src.size(), region_.key, 0);
  (void)conn_->Flush(std::chrono::steady_clock::now() + 2s);
  ASSERT_TRUE(at_client_.WaitClosed());
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(region_.data[i], 0) << "a put landed after Close returned";
  EXPECT_TRUE(mine->WaitReleased(std::chrono::steady_clock::now() + 10s));
  // The flush failed, so the puts' sources stay ours to keep until our side is
  // closed (the writer may still be sending them: ASan caught it reading src
  // after the test returned).
  conn_->Close();
  EXPECT_TRUE(conn_->WaitReleased(std::chrono::steady_clock::now() + 10s));
}

TEST_F(SocketTest, AMessageSentJustBeforeCloseStillGoesOut) {
  auto mine = Accepted();
  ASSERT_NE(mine, nullptr);
  ASSERT_TRUE(mine->Send({42, 43}).ok());  // say why, then hang up
  mine->Close();
  EXPECT_FALSE(mine->Send({1}).ok()) << "nothing is accepted after Close";
  ASSERT_TRUE(at_client_.WaitMessages(1));
  EXPECT_EQ(at_client_.messages[0], (std::vector<uint8_t>{42, 43}));
  EXPECT_TRUE(at_client_.WaitClosed());
}

TEST(Socket, AConnectionToAPortNobodyListensOnIsReportedAsRefused) {
  int port = 0;
  {
    SocketTransport gone;  // binds a free port, then lets it go
    ASSERT_TRUE(gone.Listen("127.0.0.1:0", [](std::shared_ptr<Connection>) { return ConnectionHandlers{}; }).ok());
    port = gone.listen_port();
  }
  Inbox at_client;  // outlives the transport, whose threads write into it
  SocketTransport client;
  auto c = client.Connect("127.0.0.1:" + std::to_string(port), at_client.Handlers());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(at_client.WaitClosed());
  EXPECT_EQ(at_client.why.code(), StatusCode::kNotFound) << at_client.why.ToString();
  EXPECT_NE(at_client.why.message().find("refused"), std::string::npos) << at_client.why.ToString();
  EXPECT_FALSE((*c)->Send({1}).ok());
}

TEST(Socket, BadAddressesAreRefusedByName) {
  SocketTransport t;
  for (const char* bad : {"nocolon", "256.1.1.1:80", "127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:12x"}) {
    auto c = t.Connect(bad, {});
    EXPECT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace tandem::transfer
