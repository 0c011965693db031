// Issue 26, hostile peers: the TCP listener's gate (transfer/socket_gate.h).
// Before a connection's first message is admitted it costs no thread and at
// most the gate's small buffer; a peer that declares a huge message, writes
// before it speaks, says nothing, or comes when too many wait is refused and
// closed; a refused first message gets its reply; an admitted one is
// delivered first and the connection then works as any other.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fakes/connection_inbox.h"
#include "transfer/socket.h"
#include "transfer/socket_frame.h"

namespace tandem::transfer {
namespace {

using namespace std::chrono_literals;
using Inbox = testing::ConnectionInbox;

// A field of /proc/self/status ("VmRSS", "Threads"), in its own unit.
long ProcStatus(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

// A raw TCP client: a hostile peer that speaks only frame headers.
int RawConnect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendHeader(int fd, uint32_t type, uint64_t a, uint64_t b, uint64_t length) {
  uint8_t h[socket_internal::kFrameHeaderBytes] = {};
  socket_internal::PutLe(h, type, 4);
  socket_internal::PutLe(h + 8, a, 8);
  socket_internal::PutLe(h + 16, b, 8);
  socket_internal::PutLe(h + 24, length, 8);
  return send(fd, h, sizeof(h), MSG_NOSIGNAL) == ssize_t(sizeof(h));
}

// Reads until the peer closes (bounded): what it sent, or nullopt on timeout.
std::optional<std::string> ReadUntilClosed(int fd, std::chrono::seconds limit) {
  const timeval tv{long(limit.count()), 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string got;
  char buf[4096];
  for (;;) {
    const ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r == 0) return got;
    if (r < 0) {
      return errno == ECONNRESET ? std::optional<std::string>(got) : std::nullopt;
    }
    got.append(buf, size_t(r));
  }
}

class SocketGate : public ::testing::Test {
 protected:
  void Listen(FirstMessageGate gate) {
    ASSERT_TRUE(server_.SetFirstMessageGate(std::move(gate)).ok());
    ASSERT_TRUE(server_.Listen("127.0.0.1:0", [this](std::shared_ptr<Connection> c) {
      std::lock_guard<std::mutex> lock(accepted_mu_);
      ++accepted_;
      return at_server_.Handlers();
    }).ok());
  }
  // A gate that admits the message "hello" and answers anything else "no".
  static FirstMessageGate HelloGate() {
    FirstMessageGate g;
    g.check = [](std::span<const uint8_t> m, std::vector<uint8_t>* reply) {
      if (std::string(m.begin(), m.end()) == "hello") return Status::Ok();
      *reply = {'n', 'o'};
      return FailedPrecondition("not hello");
    };
    return g;
  }
  int accepted() {
    std::lock_guard<std::mutex> lock(accepted_mu_);
    return accepted_;
  }

  Inbox at_server_, at_client_;
  SocketTransport server_, client_;
  std::mutex accepted_mu_;
  int accepted_ = 0;
};

TEST_F(SocketGate, AThousandPeersDeclaring256MiBCostNoThreadAndUnder64MiB) {
  Listen(HelloGate());
  const long rss_before = ProcStatus("VmRSS"), threads_before = ProcStatus("Threads");
  std::vector<int> peers;
  for (int i = 0; i < 1000; ++i) {
    const int fd = RawConnect(server_.listen_port());
    ASSERT_GE(fd, 0) << i;
    ASSERT_TRUE(SendHeader(fd, socket_internal::kMessageFrame, 0, 0, uint64_t(256) << 20)) << i;
    peers.push_back(fd);
  }
  // Every one is refused and closed (none waits for its 256 MiB).
  for (int fd : peers) {
    EXPECT_TRUE(ReadUntilClosed(fd, 20s).has_value());
    close(fd);
  }
  const long rss_after = ProcStatus("VmRSS"), threads_after = ProcStatus("Threads");
  std::printf("1,000 hostile peers: resident memory %+ld KiB, threads %+ld\n", rss_after - rss_before,
              threads_after - threads_before);
  EXPECT_LT(rss_after - rss_before, 64 * 1024) << "KiB";
  EXPECT_EQ(threads_after, threads_before);
  EXPECT_EQ(accepted(), 0);
  // A real peer beside them is admitted, and its first message comes first.
  auto c = client_.Connect("127.0.0.1:" + std::to_string(server_.listen_port()), at_client_.Handlers());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Send({'h', 'e', 'l', 'l', 'o'}).ok());
  ASSERT_TRUE((*c)->Send({'t', 'w', 'o'}).ok());
  ASSERT_TRUE(at_server_.WaitMessages(2));
  EXPECT_EQ(at_server_.messages[0], (std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o'}));
  EXPECT_EQ(at_server_.messages[1], (std::vector<uint8_t>{'t', 'w', 'o'}));
  EXPECT_EQ(accepted(), 1);
}

TEST_F(SocketGate, APutBeforeTheFirstMessageIsRefusedAndLandsNowhere) {
  Listen(HelloGate());
  auto region = server_.AllocateRegion(4096);
  ASSERT_TRUE(region.ok());
  std::memset(region->data, 0, 4096);
  const int fd = RawConnect(server_.listen_port());
  const uint64_t region_id = socket_internal::GetLe(region->key.blob.data() + 4, 8);
  ASSERT_TRUE(SendHeader(fd, socket_internal::kPutFrame, region_id, 0, 16));
  const char bytes[16] = "overwrite-this!";
  (void)send(fd, bytes, sizeof(bytes), MSG_NOSIGNAL);
  EXPECT_TRUE(ReadUntilClosed(fd, 20s).has_value());
  close(fd);
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(region->data[i], 0) << i;
  EXPECT_EQ(accepted(), 0);
}

TEST_F(SocketGate, APeerThatSaysNothingIsClosedAtTheDeadline) {
  FirstMessageGate g = HelloGate();
  g.deadline = 200ms;
  Listen(std::move(g));
  const int fd = RawConnect(server_.listen_port());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(ReadUntilClosed(fd, 10s).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  close(fd);
}

TEST_F(SocketGate, ARefusedFirstMessageGetsItsReplyThenTheConnectionCloses) {
  Listen(HelloGate());
  auto c = client_.Connect("127.0.0.1:" + std::to_string(server_.listen_port()), at_client_.Handlers());
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Send({'b', 'y', 'e'}).ok());
  ASSERT_TRUE(at_client_.WaitMessages(1));
  EXPECT_EQ(at_client_.messages[0], (std::vector<uint8_t>{'n', 'o'}));
  EXPECT_TRUE(at_client_.WaitClosed());
  EXPECT_EQ(accepted(), 0);
}

TEST_F(SocketGate, PastThePendingCapTheLongestWaitingGoesAndARealPeerStillGetsIn) {
  FirstMessageGate g = HelloGate();
  g.max_pending = 4;
  g.deadline = 30s;
  Listen(std::move(g));
  std::vector<int> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(RawConnect(server_.listen_port()));
  // A fifth arrives: the first silent one is closed, not the newcomer.
  auto c = client_.Connect("127.0.0.1:" + std::to_string(server_.listen_port()), at_client_.Handlers());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(ReadUntilClosed(silent[0], 10s).has_value());
  ASSERT_TRUE((*c)->Send({'h', 'e', 'l', 'l', 'o'}).ok());
  ASSERT_TRUE(at_server_.WaitMessages(1));
  EXPECT_EQ(accepted(), 1);
  for (int fd : silent) close(fd);
}

}  // namespace
}  // namespace tandem::transfer
