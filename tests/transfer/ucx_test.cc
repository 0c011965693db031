// The UCX transport on 127.0.0.1 (shared memory / TCP inside one host): the
// same contract as loopback — puts land by Flush, messages arrive in order,
// large messages too, and a closed peer is reported.
#include "transfer/ucx.h"

#include <gtest/gtest.h>
#include <sys/shm.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <string>
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

// Issue 26: behind the listener's gate a peer is a pending endpoint and
// nothing more until its first message is admitted — no on_accept, no
// endpoint made from the worker address it sent, nothing fetched that it
// declares past the limit. An admitted peer works as any other, both ways.
TEST(Ucx, TheGateAdmitsOnlyAnAcceptedFirstMessageAndRefusesEveryOtherPeer) {
  Inbox at_server, good, big, huge, bad, silent;  // before the transports
  std::atomic<int> accepted{0};
  std::shared_ptr<Connection> admitted;
  auto server = UcxTransport::Create();
  auto client = UcxTransport::Create();
  ASSERT_TRUE(server.ok() && client.ok());
  FirstMessageGate gate;
  gate.max_bytes = 1024;
  gate.deadline = 2s;  // the screen and the check come long before it, even on a loaded machine
  gate.check = [](std::span<const uint8_t> m, std::vector<uint8_t>* reply) {
    if (std::string(m.begin(), m.end()) == "hello") return Status::Ok();
    *reply = {'n', 'o'};
    return InvalidArgument("not a hello");
  };
  ASSERT_TRUE((*server)->SetFirstMessageGate(gate).ok());
  ASSERT_TRUE((*server)
                  ->Listen("127.0.0.1:0",
                           [&](std::shared_ptr<Connection> c) {
                             ++accepted;
                             admitted = c;
                             return at_server.Handlers();
                           })
                  .ok());
  EXPECT_EQ((*server)->SetFirstMessageGate(gate).code(), StatusCode::kFailedPrecondition);
  const std::string address = "127.0.0.1:" + std::to_string((*server)->listen_port());
  auto dial = [&](Inbox& inbox) {
    auto c = (*client)->Connect(address, inbox.Handlers());
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *c : nullptr;
  };

  auto c_big = dial(big);    // a first message past the limit
  auto c_huge = dial(huge);  // one declared by rendezvous: never fetched
  auto c_bad = dial(bad);    // a first message the check refuses
  auto c_silent = dial(silent);
  ASSERT_TRUE(c_big && c_huge && c_bad && c_silent);
  ASSERT_TRUE(c_big->Send(std::vector<uint8_t>(2048, 1)).ok());
  ASSERT_TRUE(c_huge->Send(std::vector<uint8_t>(4 << 20, 2)).ok());
  ASSERT_TRUE(c_bad->Send({'h', 'i'}).ok());
  // Each refused, once, for its reason (UCX tells a peer nothing when its
  // endpoint is dropped; a real decode server sees no answer and retries).
  const std::map<std::string, int64_t> want = {
      {"its first message declares ", 2},  // 2048 bytes, and 4 MiB by rendezvous
      {"its first message was refused: not a hello", 1},
      {"no first message within ", 1}};
  const auto until = Clock::now() + 20s;
  while ((*server)->refusals() != want && Clock::now() < until) silent.WaitClosedFor(20ms);
  EXPECT_EQ((*server)->refusals(), want);
  EXPECT_EQ(accepted.load(), 0);

  auto c_good = dial(good);
  ASSERT_TRUE(c_good);
  ASSERT_TRUE(c_good->Send({'h', 'e', 'l', 'l', 'o'}).ok());
  ASSERT_TRUE(at_server.WaitMessages(1));  // admitted (what comes before is held to the limit)
  ASSERT_TRUE(c_good->Send(std::vector<uint8_t>(1 << 20, 3)).ok());
  ASSERT_TRUE(at_server.WaitMessages(2));
  EXPECT_EQ(accepted.load(), 1);
  EXPECT_EQ(at_server.messages[0], (std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o'}));
  EXPECT_EQ(at_server.messages[1].size(), size_t(1) << 20);
  // Puts both ways: the data endpoints are made at the first put.
  auto at_server_region = (*server)->AllocateRegion(1 << 16);
  auto at_client_region = (*client)->AllocateRegion(1 << 16);
  ASSERT_TRUE(at_server_region.ok() && at_client_region.ok());
  std::vector<uint8_t> data(4096, 0x5a);
  ASSERT_TRUE(c_good->Put(data.data(), data.size(), at_server_region->key, 0).ok());
  ASSERT_TRUE(c_good->Flush(Clock::now() + 20s).ok());
  EXPECT_EQ(0, std::memcmp(at_server_region->data, data.data(), data.size()));
  ASSERT_NE(admitted, nullptr);
  ASSERT_TRUE(admitted->Put(data.data(), data.size(), at_client_region->key, 512).ok());
  ASSERT_TRUE(admitted->Flush(Clock::now() + 20s).ok());
  EXPECT_EQ(0, std::memcmp(at_client_region->data + 512, data.data(), data.size()));
  EXPECT_FALSE(good.closed);
  EXPECT_EQ((*server)->refusals(), want);  // nothing more
}

// Past max_pending waiting peers, the one that has waited longest is closed,
// not the newcomer: silent connections cannot keep a real peer out.
TEST(Ucx, AFullGateClosesTheLongestWaitingPeer) {
  Inbox first, second, third, real, at_server;
  auto server = UcxTransport::Create();
  auto client = UcxTransport::Create();
  ASSERT_TRUE(server.ok() && client.ok());
  FirstMessageGate gate;
  gate.max_pending = 2;
  gate.deadline = 60s;  // only the cap closes anyone here
  ASSERT_TRUE((*server)->SetFirstMessageGate(gate).ok());
  ASSERT_TRUE((*server)->Listen("127.0.0.1:0", [&](std::shared_ptr<Connection>) { return at_server.Handlers(); }).ok());
  const std::string address = "127.0.0.1:" + std::to_string((*server)->listen_port());
  std::vector<std::shared_ptr<Connection>> held;
  for (Inbox* in : {&first, &second, &third}) {
    auto c = (*client)->Connect(address, in->Handlers());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    held.push_back(*c);
  }
  // Three waited where two may: one was closed.
  const std::map<std::string, int64_t> one = {
      {"too many connections are waiting to authenticate (", 1}};
  const auto until = Clock::now() + 20s;
  while ((*server)->refusals().empty() && Clock::now() < until) first.WaitClosedFor(20ms);
  EXPECT_EQ((*server)->refusals(), one);
  // A real peer still gets in (and closes another waiting one).
  auto c = (*client)->Connect(address, real.Handlers());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Send({7}).ok());
  ASSERT_TRUE(at_server.WaitMessages(1));
  EXPECT_EQ(at_server.messages[0], std::vector<uint8_t>{7});
  EXPECT_EQ((*server)->refusals().begin()->second, 2);
}

}  // namespace
}  // namespace tandem::transfer

namespace tandem::transfer {
namespace {

// Issue 26: with a cluster key, a connection request must carry the key's
// knock (UcxTransport::Create); one without it, or with another key's, is
// rejected inside UCX's connection manager, before an endpoint exists, so
// the peer can make the listener hold nothing (not even a multi-fragment
// eager message, which UCX reassembles before any screen sees it).
TEST(Ucx, AConnectionRequestWithoutTheClusterKnockIsRejectedBeforeAnEndpointExists) {
  Inbox none, other, right, at_server;
  std::atomic<int> accepted{0};
  const uint64_t knock = 0x5eed5eed5eed5eedull;
  auto server = UcxTransport::Create(false, knock);
  auto no_knock = UcxTransport::Create();
  auto wrong_knock = UcxTransport::Create(false, knock ^ 1);
  auto same_key = UcxTransport::Create(false, knock);
  ASSERT_TRUE(server.ok() && no_knock.ok() && wrong_knock.ok() && same_key.ok());
  FirstMessageGate gate;
  gate.check = [](std::span<const uint8_t>, std::vector<uint8_t>*) { return Status::Ok(); };
  ASSERT_TRUE((*server)->SetFirstMessageGate(gate).ok());
  ASSERT_TRUE((*server)
                  ->Listen("127.0.0.1:0",
                           [&](std::shared_ptr<Connection>) {
                             ++accepted;
                             return at_server.Handlers();
                           })
                  .ok());
  const std::string address = "127.0.0.1:" + std::to_string((*server)->listen_port());
  auto c_none = (*no_knock)->Connect(address, none.Handlers());
  auto c_other = (*wrong_knock)->Connect(address, other.Handlers());
  ASSERT_TRUE(c_none.ok() && c_other.ok());
  (void)(*c_none)->Send({1});
  (void)(*c_other)->Send({2});
  // Each rejected: the peer's endpoint fails (UCX says "rejected"), the
  // listener counts it, and no connection is ever made or accepted.
  EXPECT_TRUE(none.WaitClosed());
  EXPECT_TRUE(other.WaitClosed());
  const std::map<std::string, int64_t> want = {{"its connection request does not carry the cluster key's knock", 2}};
  const auto until = Clock::now() + 20s;
  while ((*server)->refusals() != want && Clock::now() < until) right.WaitClosedFor(20ms);  // not yet dialed: a 20 ms pause
  EXPECT_EQ((*server)->refusals(), want);
  EXPECT_EQ(accepted.load(), 0);

  auto c_right = (*same_key)->Connect(address, right.Handlers());
  ASSERT_TRUE(c_right.ok());
  ASSERT_TRUE((*c_right)->Send({'h', 'i'}).ok());
  ASSERT_TRUE(at_server.WaitMessages(1));
  {
    std::lock_guard<std::mutex> lock(at_server.mu);
    EXPECT_EQ(at_server.messages[0], (std::vector<uint8_t>{'h', 'i'}));
  }
  EXPECT_EQ(accepted.load(), 1);
  EXPECT_FALSE(right.WaitClosedFor(0ms));
  EXPECT_EQ((*server)->refusals(), want);
}

}  // namespace
}  // namespace tandem::transfer
