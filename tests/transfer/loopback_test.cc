// The loopback transport and the fault-injecting wrapper honour the transport
// contract: puts land by Flush, messages are ordered but may overtake puts,
// Close drops what has not landed, and every fault is injected as planned.
#include "transfer/loopback.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "faults/faulty_connection.h"
#include "transfer/messages.h"
#include "support/wait.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using faults::FaultPlan;  // the fault library (src/faults/)
using faults::FaultyConnection;

struct Pair {
  std::shared_ptr<LoopbackNetwork> net;
  LoopbackTransport a, b;
  Region region;  // b's memory
  std::shared_ptr<Connection> a_to_b;
  std::mutex mu;
  std::vector<std::vector<uint8_t>> received;
  std::vector<uint8_t> seen_at_message;  // b's memory when each message arrived (first byte)
  std::atomic<int> closes{0};

  explicit Pair(LoopbackOptions opt = {}) : net(std::make_shared<LoopbackNetwork>(opt)), a(net), b(net) {
    region = *b.AllocateRegion(4096);
    std::memset(region.data, 0, region.size);
    EXPECT_TRUE(b.Listen("b", [this](std::shared_ptr<Connection>) {
                   ConnectionHandlers h;
                   h.on_message = [this](Connection&, std::vector<uint8_t> m) {
                     std::lock_guard<std::mutex> lock(mu);
                     seen_at_message.push_back(region.data[0]);
                     received.push_back(std::move(m));
                   };
                   h.on_close = [this](Connection&, const Status&) { ++closes; };
                   return h;
                 }).ok());
    a_to_b = *a.Connect("b", {});
  }
  size_t Count() {
    std::lock_guard<std::mutex> lock(mu);
    return received.size();
  }
  void WaitFor(size_t n) {
    EXPECT_TRUE(testing::WaitUntil([&] { return Count() >= n; }, 2s, 1ms)) << "only " << Count() << " of " << n;
  }
};

TEST(Loopback, PutsLandByFlushAndMessagesAreOrdered) {
  Pair p;
  const std::vector<uint8_t> data(100, 7);
  Status st = p.a_to_b->Put(data.data(), data.size(), p.region.key, 50);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(p.a_to_b->Flush(Clock::now() + 5s).ok());
  EXPECT_EQ(p.region.data[50], 7);
  EXPECT_EQ(p.region.data[149], 7);
  EXPECT_EQ(p.region.data[150], 0);
  for (uint8_t i = 0; i < 20; ++i) ASSERT_TRUE(p.a_to_b->Send({i}).ok());
  p.WaitFor(20);
  ASSERT_EQ(p.Count(), 20u);
  for (uint8_t i = 0; i < 20; ++i) EXPECT_EQ(p.received[i][0], i);
}

TEST(Loopback, AMessageOvertakesUnflushedPutsButNotFlushedOnes) {
  Pair p(LoopbackOptions{20ms, 0us});
  const uint8_t one = 1;
  ASSERT_TRUE(p.a_to_b->Put(&one, 1, p.region.key, 0).ok());
  ASSERT_TRUE(p.a_to_b->Send({9}).ok());  // no flush: the "early commit" bug
  p.WaitFor(1);
  ASSERT_TRUE(p.a_to_b->Flush(Clock::now() + 5s).ok());
  const uint8_t two = 2;
  ASSERT_TRUE(p.a_to_b->Put(&two, 1, p.region.key, 0).ok());
  ASSERT_TRUE(p.a_to_b->Flush(Clock::now() + 5s).ok());
  ASSERT_TRUE(p.a_to_b->Send({10}).ok());  // flushed first: the data is there
  p.WaitFor(2);
  ASSERT_EQ(p.Count(), 2u);
  EXPECT_EQ(p.seen_at_message[0], 0) << "the message arrived before the put landed";
  EXPECT_EQ(p.seen_at_message[1], 2);
}

TEST(Loopback, BadPutsAreRejected) {
  Pair p;
  uint8_t x = 0;
  EXPECT_EQ(p.a_to_b->Put(&x, 1, p.region.key, 4096).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(p.a_to_b->Put(&x, 4097, p.region.key, 0).code(), StatusCode::kOutOfRange);
  RemoteKey bogus{{1, 2, 3}, 10};
  EXPECT_EQ(p.a_to_b->Put(&x, 1, bogus, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(p.a.Connect("nowhere", {}).ok());
}

TEST(Loopback, CloseDropsPutsThatHaveNotLanded) {
  Pair p(LoopbackOptions{30ms, 0us});
  const std::vector<uint8_t> data(64, 5);
  ASSERT_TRUE(p.a_to_b->Put(data.data(), data.size(), p.region.key, 0).ok());
  p.a_to_b->Close();
  std::this_thread::sleep_for(60ms);  // twice the put latency: a window in which the dropped put may not land
  EXPECT_EQ(p.region.data[0], 0) << "a put landed after Close returned";
  EXPECT_FALSE(p.a_to_b->alive());
  EXPECT_EQ(p.a_to_b->Put(data.data(), 1, p.region.key, 0).code(), StatusCode::kUnavailable);
  EXPECT_EQ(p.a_to_b->Flush(Clock::now() + 1s).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(testing::WaitUntil([&] { return p.closes > 0; }, 2s, 1ms));
  EXPECT_EQ(p.closes, 1) << "the peer heard about it";
}

TEST(Faulty, DelayedPutsAreCoveredByFlush) {
  Pair p;
  FaultPlan plan;
  plan.put_delay = 20ms;
  FaultyConnection f(p.a_to_b, plan);
  const uint8_t v = 3;
  ASSERT_TRUE(f.Put(&v, 1, p.region.key, 0).ok());
  ASSERT_TRUE(f.Send({1}).ok());
  ASSERT_TRUE(f.Flush(Clock::now() + 5s).ok());
  EXPECT_EQ(p.region.data[0], 3);
  p.WaitFor(1);
  EXPECT_EQ(p.seen_at_message.at(0), 0) << "the unflushed put was overtaken";
}

TEST(Faulty, MessagesAreDroppedDuplicatedAndReorderedAsPlanned) {
  {
    Pair p;
    FaultPlan plan;
    plan.drop_message_rate = 1.0;
    FaultyConnection f(p.a_to_b, plan);
    ASSERT_TRUE(f.Send({1}).ok());
    std::this_thread::sleep_for(20ms);  // a window in which the dropped message may not arrive
    EXPECT_EQ(p.Count(), 0u);
  }
  {
    Pair p;
    FaultPlan plan;
    plan.duplicate_message_rate = 1.0;
    FaultyConnection f(p.a_to_b, plan);
    ASSERT_TRUE(f.Send({1}).ok());
    p.WaitFor(2);
    EXPECT_EQ(p.Count(), 2u);
  }
  {
    Pair p;
    FaultPlan plan;
    plan.reorder_messages = true;
    FaultyConnection f(p.a_to_b, plan);
    ASSERT_TRUE(f.Send({1}).ok());
    ASSERT_TRUE(f.Send({2}).ok());
    p.WaitFor(2);
    ASSERT_EQ(p.Count(), 2u);
    EXPECT_EQ(p.received[0][0], 2);
    EXPECT_EQ(p.received[1][0], 1);
  }
}

// A wedge counts from the Hello its side sends: a heartbeat that went out
// before (a prefill engine beats to a peer it has not yet answered) passes
// uncounted, so "its Hello, then silence" holds however the two interleave.
TEST(Faulty, AWedgeCountsFromTheHelloItSends) {
  Pair p;
  FaultPlan plan;
  plan.drop_messages_after = 1;
  FaultyConnection f(p.a_to_b, plan);
  ASSERT_TRUE(f.Send(Heartbeat{7}.Encode()).ok());
  ASSERT_TRUE(f.Send(Hello{"prefill", "layout", "weights", 7, 9, {}, {}, {}, {}}.Encode()).ok());
  ASSERT_TRUE(f.Send(Heartbeat{7}.Encode()).ok());  // the wedge: dropped
  ASSERT_TRUE(p.a_to_b->Send({0xEE}).ok());          // past the wrapper: delivered, after the others
  p.WaitFor(3);
  std::lock_guard<std::mutex> lock(p.mu);
  ASSERT_EQ(p.received.size(), 3u);
  EXPECT_EQ(PeekType(p.received[0]).value(), MessageType::kHeartbeat);
  EXPECT_EQ(PeekType(p.received[1]).value(), MessageType::kHello);
  EXPECT_EQ(p.received[2], std::vector<uint8_t>{0xEE});
}

TEST(Faulty, BitFlipsAndPeerDeath) {
  Pair p;
  FaultPlan plan;
  plan.bit_flip_rate = 1.0;
  plan.die_after_puts = 2;
  FaultyConnection f(p.a_to_b, plan);
  const std::vector<uint8_t> zeros(32, 0);
  ASSERT_TRUE(f.Put(zeros.data(), zeros.size(), p.region.key, 0).ok());
  ASSERT_TRUE(f.Flush(Clock::now() + 5s).ok());
  int bits = 0;
  for (int i = 0; i < 32; ++i) bits += __builtin_popcount(p.region.data[i]);
  EXPECT_EQ(bits, 1) << "exactly one bit flipped";
  EXPECT_EQ(zeros[0] + zeros[31], 0) << "the sender's buffer is untouched";
  EXPECT_EQ(f.flipped_puts(), 1);
  ASSERT_TRUE(f.Put(zeros.data(), 1, p.region.key, 100).ok());
  EXPECT_EQ(f.Put(zeros.data(), 1, p.region.key, 200).code(), StatusCode::kUnavailable);
  EXPECT_FALSE(f.alive());
}

}  // namespace
}  // namespace tandem::transfer
