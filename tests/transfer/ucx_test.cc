// The UCX transport on 127.0.0.1 (shared memory / TCP inside one host): the
// same contract as loopback — puts land by Flush, messages arrive in order,
// large messages too, and a closed peer is reported.
#include "transfer/ucx.h"

#include <gtest/gtest.h>
#include <sys/shm.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <thread>

#include "fakes/connection_inbox.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;

using Inbox = testing::ConnectionInbox;

TEST(Ucx, PutsFlushAndOrderedMessagesBetweenTwoWorkers) {
  Inbox at_server, at_client;  // before the transports: their threads write here until they are gone
  auto server = UcxTransport::Create();
  auto client = UcxTransport::Create();
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto region = (*server)->AllocateRegion(1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  std::memset(region->data, 0, region->size);
  std::shared_ptr<Connection> accepted;
  ASSERT_TRUE((*server)
                  ->Listen("127.0.0.1:0",
                           [&](std::shared_ptr<Connection> c) {
                             accepted = c;
                             return at_server.Handlers();
                           })
                  .ok());
  const int port = (*server)->listen_port();
  ASSERT_GT(port, 0);
  auto conn = (*client)->Connect("127.0.0.1:" + std::to_string(port), at_client.Handlers());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  // One-sided writes into the server's region, then flush.
  std::vector<uint8_t> data(300000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 7 + 1);
  ASSERT_TRUE((*conn)->Put(data.data(), data.size(), region->key, 4096).ok());
  Status flushed = (*conn)->Flush(Clock::now() + 20s);
  ASSERT_TRUE(flushed.ok()) << flushed.ToString();
  EXPECT_EQ(0, std::memcmp(region->data + 4096, data.data(), data.size()));
  EXPECT_EQ(region->data[4095], 0);
  EXPECT_EQ((*conn)->Put(data.data(), 10, region->key, (1 << 20) - 5).code(), StatusCode::kOutOfRange);
  // The prefill engine once used a key claiming UINT64_MAX bytes: the region's
  // own size, carried in its key, still bounds the put (issue 26).
  const RemoteKey unbounded{region->key.blob, UINT64_MAX};
  EXPECT_EQ((*conn)->Put(data.data(), 10, unbounded, (1 << 20) - 5).code(), StatusCode::kOutOfRange);
  EXPECT_EQ((*conn)->Put(data.data(), 10, unbounded, uint64_t(1) << 40).code(), StatusCode::kOutOfRange);
  // Messages, small and large (rendezvous), in order.
  for (uint8_t i = 0; i < 10; ++i) ASSERT_TRUE((*conn)->Send({i}).ok());
  ASSERT_TRUE((*conn)->Send(std::vector<uint8_t>(1 << 20, 42)).ok());
  ASSERT_TRUE(at_server.WaitMessages(11));
  for (uint8_t i = 0; i < 10; ++i) EXPECT_EQ(at_server.messages[i], std::vector<uint8_t>{i});
  EXPECT_EQ(at_server.messages[10].size(), size_t(1) << 20);
  EXPECT_EQ(at_server.messages[10][12345], 42);
  // And back the other way on the accepted connection.
  ASSERT_NE(accepted, nullptr);
  ASSERT_TRUE(accepted->Send({9, 9}).ok());
  ASSERT_TRUE(at_client.WaitMessages(1));
  EXPECT_EQ(at_client.messages[0], (std::vector<uint8_t>{9, 9}));
  (*conn)->Close();
  EXPECT_FALSE((*conn)->alive());
  EXPECT_EQ((*conn)->Put(data.data(), 1, region->key, 0).code(), StatusCode::kUnavailable);
}

// A batch of puts (scattered, adjacent, and coalesced runs) lands byte for
// byte as the same puts one by one would; one op out of range refuses the
// batch before anything is written.
TEST(Ucx, PutManyLandsEveryOpAndCoalescingChangesNoByte) {
  Inbox at_server, at_client;
  auto server = UcxTransport::Create();
  auto client = UcxTransport::Create();
  ASSERT_TRUE(server.ok() && client.ok());
  auto region = (*server)->AllocateRegion(72 * 8448);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  std::memset(region->data, 0, region->size);
  ASSERT_TRUE((*server)->Listen("127.0.0.1:0", [&](std::shared_ptr<Connection>) { return at_server.Handlers(); }).ok());
  auto conn = (*client)->Connect("127.0.0.1:" + std::to_string((*server)->listen_port()), at_client.Handlers());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  std::vector<uint8_t> src(32 * 8448);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t((i * 2654435761u) >> 13);  // no page repeats another
  // Source pages 0..31 to destination pages: 3,4,5 (a run), 40, 7, 8 (a run), then 26 scattered pages.
  std::vector<int> dst = {3, 4, 5, 40, 7, 8};
  for (int p = 6; p < 32; ++p) dst.push_back(44 + (p - 6) * 7 % 26);
  std::vector<PutOp> ops;
  for (size_t p = 0; p < dst.size(); ++p) ops.push_back({src.data() + p * 8448, 8448, uint64_t(dst[p]) * 8448});
  std::vector<PutOp> merged = ops;
  const size_t n = CoalescePuts(merged);
  EXPECT_EQ(merged[0].bytes, 3u * 8448);
  EXPECT_EQ(merged[1].offset, 40u * 8448);
  EXPECT_EQ(merged[2].bytes, 2u * 8448);
  EXPECT_EQ(n, ops.size() - 3);
  ASSERT_TRUE((*conn)->PutMany(std::span<const PutOp>(merged.data(), n), region->key).ok());
  ASSERT_TRUE((*conn)->Flush(Clock::now() + 20s).ok());
  for (size_t p = 0; p < dst.size(); ++p) {
    EXPECT_EQ(0, std::memcmp(region->data + dst[p] * 8448, src.data() + p * 8448, 8448)) << "page " << p;
  }
  std::vector<uint8_t> before(region->data, region->data + region->size);
  const PutOp bad[] = {{src.data(), 8448, 0}, {src.data(), 8448, 72 * 8448 - 100}};
  EXPECT_EQ((*conn)->PutMany(bad, region->key).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(0, std::memcmp(before.data(), region->data, region->size)) << "a refused batch wrote something";
  (*conn)->Close();
}

UcxKeyHeader HeaderOf(const RemoteKey& key) {
  UcxKeyHeader h;
  EXPECT_GT(key.blob.size(), sizeof(h));
  std::memcpy(&h, key.blob.data(), sizeof(h));
  return h;
}

TEST(Ucx, RegionKeyNamesTheSharedMemorySegmentHoldingIt) {
  auto owner = UcxTransport::Create();
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  auto region = (*owner)->AllocateRegion(1 << 20);
  ASSERT_TRUE(region.ok()) << region.status().ToString();
  const UcxKeyHeader h = HeaderOf(region->key);
  EXPECT_EQ(h.base, reinterpret_cast<uint64_t>(region->data));
  EXPECT_NE(h.ipc_identity, 0u);
  if (h.shmid < 0) GTEST_SKIP() << "UCX did not allocate this region from SysV shared memory";
  // The named segment is the region: bytes written through one mapping are
  // read through another.
  for (size_t i = 0; i < 4096; ++i) region->data[i] = uint8_t(i * 13 + 5);
  void* other = shmat(int(h.shmid), nullptr, SHM_RDONLY);
  ASSERT_NE(other, reinterpret_cast<void*>(-1)) << std::strerror(errno);
  EXPECT_EQ(0, std::memcmp(other, region->data, 4096));
  shmdt(other);
}

// A peer killed after sending its key and before our first put: its segment
// is gone. UCX's own unpack would crash on that key; ours must refuse it.
TEST(Ucx, PutIntoARegionWhoseOwnerExitedIsRefusedWithoutCrashing) {
  RemoteKey dead_key;
  {
    auto gone = UcxTransport::Create();
    ASSERT_TRUE(gone.ok()) << gone.status().ToString();
    auto region = (*gone)->AllocateRegion(1 << 16);
    ASSERT_TRUE(region.ok()) << region.status().ToString();
    dead_key = region->key;
  }  // the owner is destroyed: its segment is unmapped and removed
  if (HeaderOf(dead_key).shmid < 0) GTEST_SKIP() << "UCX did not allocate the region from SysV shared memory";
  Inbox at_server, at_client;  // before the transports: their threads write here until they are gone
  auto server = UcxTransport::Create();
  auto client = UcxTransport::Create();
  ASSERT_TRUE(server.ok() && client.ok());
  auto live = (*server)->AllocateRegion(1 << 16);
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  ASSERT_TRUE((*server)->Listen("127.0.0.1:0", [&](std::shared_ptr<Connection>) { return at_server.Handlers(); }).ok());
  auto conn = (*client)->Connect("127.0.0.1:" + std::to_string((*server)->listen_port()), at_client.Handlers());
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  std::vector<uint8_t> data(4096, 0x5a);
  const Status refused = (*conn)->Put(data.data(), data.size(), dead_key, 0);
  EXPECT_EQ(refused.code(), StatusCode::kUnavailable) << refused.ToString();
  EXPECT_NE(refused.message().find("is gone"), std::string::npos) << refused.ToString();
  // The connection still works for live regions.
  ASSERT_TRUE((*conn)->Put(data.data(), data.size(), live->key, 0).ok());
  ASSERT_TRUE((*conn)->Flush(Clock::now() + 20s).ok());
  EXPECT_EQ(0, std::memcmp(live->data, data.data(), data.size()));
}

}  // namespace
}  // namespace tandem::transfer
