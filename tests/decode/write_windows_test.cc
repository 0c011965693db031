// Issue 26: the decode side's cache accepts TCP writes only from the
// connection of the handoff that reserved those pages, only into those pages,
// only while that handoff holds them (decode/write_windows.h). Once, puts
// were accepted for any region of the process before the peer's Hello was
// checked: a process that took over a prefill engine's port could overwrite
// published prefix-cache pages.
#include "decode/write_windows.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "cache/registry.h"
#include "fakes/connection_inbox.h"
#include "transfer/socket.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;

CacheLayout TwoBufferLayout() {
  CacheBufferRegistry r;
  EXPECT_TRUE(r.Register({"k", CacheDType::kF32, 4}).ok());
  EXPECT_TRUE(r.Register({"index_k", CacheDType::kBF16, 8}).ok());
  return CacheLayout(r, /*n_layers=*/2, /*n_pages=*/8);
}

TEST(WriteWindows, OnlyTheOpenPagesOfTheirOwnConnectionInWholeSegments) {
  const CacheLayout layout = TwoBufferLayout();
  WriteWindows w(layout);
  const uint64_t base = uint64_t(layout.SegmentBase(1, 1)), stride = uint64_t(layout.page_stride(1));
  EXPECT_FALSE(w.Allows(7, base + 2 * stride, stride)) << "nothing is open before a destination";
  const std::vector<int32_t> pages = {2, 3};
  w.Open(7, /*handoff=*/1, pages);
  EXPECT_TRUE(w.Allows(7, base + 2 * stride, stride));
  EXPECT_TRUE(w.Allows(7, base + 2 * stride, 2 * stride)) << "adjacent pages coalesced into one put";
  EXPECT_FALSE(w.Allows(7, base + 2 * stride, 3 * stride)) << "page 4 is not open";
  EXPECT_FALSE(w.Allows(8, base + 2 * stride, stride)) << "another connection";
  EXPECT_FALSE(w.Allows(7, base + 2 * stride + 1, stride - 1)) << "not a whole page segment";
  EXPECT_FALSE(w.Allows(7, uint64_t(layout.TotalBytes()), stride)) << "past the pool";
  // Every buffer and layer of an open page.
  for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
    for (int l = 0; l < layout.n_layers(); ++l) {
      EXPECT_TRUE(w.Allows(7, uint64_t(layout.SegmentBase(b, l) + 3 * layout.page_stride(b)),
                           uint64_t(layout.page_stride(b))));
    }
  }
  // Two handoffs holding page 3: open until both let go.
  const std::vector<int32_t> three = {3};
  w.Open(7, 2, three);
  w.Close(7, 1);
  w.Close(7, 1);  // again: nothing
  EXPECT_FALSE(w.Allows(7, base + 2 * stride, stride));
  EXPECT_TRUE(w.Allows(7, base + 3 * stride, stride));
  w.Close(7, 2);
  EXPECT_FALSE(w.Allows(7, base + 3 * stride, stride));
}

// A handoff's window ends with the message that ends it (its Commit, its
// AbortAck): a put into its pages read after that message was sent after the
// peer said it was done, and may still be landing while the engine acts on
// the message; CloseIfQuiet says so. Puts before it, and puts into another
// open handoff's pages after it (the next handoff, pipelined), do not count.
TEST(WriteWindows, APutAfterTheMessageThatEndsAHandoffIsCaught) {
  const CacheLayout layout = TwoBufferLayout();
  WriteWindows w(layout);
  const uint64_t base = uint64_t(layout.SegmentBase(0, 0)), stride = uint64_t(layout.page_stride(0));
  const std::vector<int32_t> first = {1, 2}, second = {4};
  w.Open(7, 10, first);
  w.Open(7, 11, second);
  EXPECT_EQ(w.MessageArrived(7), 1u);  // the Destination's answer, say
  EXPECT_TRUE(w.Allows(7, base + 1 * stride, 2 * stride));  // handoff 10's bytes
  const uint64_t commit_10 = w.MessageArrived(7);
  EXPECT_TRUE(w.Allows(7, base + 4 * stride, stride));  // handoff 11's, pipelined after it
  EXPECT_TRUE(w.CloseIfQuiet(7, 10, commit_10));
  EXPECT_FALSE(w.Allows(7, base + 2 * stride, stride)) << "closed: refused";
  // Handoff 11: a put into its pages after its Commit.
  const uint64_t commit_11 = w.MessageArrived(7);
  EXPECT_TRUE(w.Allows(7, base + 4 * stride, stride)) << "the window was still open when it was read";
  EXPECT_FALSE(w.CloseIfQuiet(7, 11, commit_11));
  EXPECT_FALSE(w.Allows(7, base + 4 * stride, stride));
  // A connection forgotten keeps nothing; its count starts again.
  w.Forget(7);
  EXPECT_EQ(w.MessageArrived(7), 1u);
}

// Over real TCP: the decode side connects out (as to a prefill engine); a peer
// that writes into its region lands nothing, and is cut off, unless the
// window for those pages is open on that connection.
TEST(WriteWindows, APeerOnTheTcpTransportWritesNowhereOutsideItsOpenPages) {
  const CacheLayout layout = TwoBufferLayout();
  WriteWindows windows(layout);
  testing::ConnectionInbox at_decode, at_peer;
  SocketTransport decode, peer;
  auto region = decode.AllocateRegion(size_t(layout.TotalBytes()));
  ASSERT_TRUE(region.ok());
  std::memset(region->data, 0, region->size);
  std::shared_ptr<Connection> accepted;
  std::mutex mu;
  std::condition_variable cv;
  ASSERT_TRUE(peer.Listen("127.0.0.1:0", [&](std::shared_ptr<Connection> c) {
    std::lock_guard<std::mutex> lock(mu);
    accepted = c;
    cv.notify_all();
    return at_peer.Handlers();
  }).ok());
  auto connect = [&] {
    ConnectionHandlers h = at_decode.Handlers();
    h.accept_put = [&windows](Connection& c, uint64_t offset, uint64_t bytes) {
      return windows.Allows(c.id(), offset, bytes);
    };
    auto c = decode.Connect("127.0.0.1:" + std::to_string(peer.listen_port()), std::move(h));
    EXPECT_TRUE(c.ok());
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 10s, [&] { return accepted != nullptr; }));
    auto a = std::exchange(accepted, nullptr);
    return std::make_pair(*c, a);
  };
  const uint64_t stride = uint64_t(layout.page_stride(0)), base = uint64_t(layout.SegmentBase(0, 0));
  const std::vector<uint8_t> garbage(stride, 0xAB);

  // No window: the hostile put lands nowhere and the decode side hangs up, saying why.
  auto [mine, theirs] = connect();
  ASSERT_TRUE(theirs->Put(garbage.data(), stride, region->key, base + 5 * stride).ok());
  (void)theirs->Flush(Clock::now() + 5s);
  ASSERT_TRUE(at_decode.WaitClosed());
  {
    std::lock_guard<std::mutex> lock(at_decode.mu);
    EXPECT_NE(at_decode.why.message().find("outside the pages of this connection's open handoffs"), std::string::npos)
        << at_decode.why.ToString();
  }
  for (size_t i = 0; i < region->size; ++i) ASSERT_EQ(region->data[i], 0) << i;

  // A window for page 5 on a new connection: that page lands, a put next to it does not.
  {
    std::lock_guard<std::mutex> lock(at_decode.mu);
    at_decode.closed = false;
  }
  auto [mine2, theirs2] = connect();
  const std::vector<int32_t> five = {5};
  windows.Open(mine2->id(), /*handoff=*/1, five);
  ASSERT_TRUE(theirs2->Put(garbage.data(), stride, region->key, base + 5 * stride).ok());
  ASSERT_TRUE(theirs2->Flush(Clock::now() + 10s).ok());
  EXPECT_EQ(region->data[base + 5 * stride], 0xAB);
  ASSERT_TRUE(theirs2->Put(garbage.data(), stride, region->key, base + 6 * stride).ok());
  (void)theirs2->Flush(Clock::now() + 5s);
  ASSERT_TRUE(at_decode.WaitClosed());
  EXPECT_EQ(region->data[base + 6 * stride], 0);
  mine->Close();
  mine2->Close();
  // The peer's puts that no Flush confirmed may still be read from `garbage`
  // until their connection is released (the transport's contract).
  for (const auto& c : {theirs, theirs2}) {
    c->Close();
    EXPECT_TRUE(c->WaitReleased(Clock::now() + 10s));
  }
}

}  // namespace
}  // namespace tandem::transfer
