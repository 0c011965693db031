// Issue 26, hostile peers, as real processes on 127.0.0.1 over the TCP
// transport: a flood of connections that never authenticate costs a prefill
// engine no thread and little memory, while a real decode server connected
// beside them keeps serving answers equal to colocated.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "support/disagg_client.h"
#include "support/http_client.h"
#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

using testing::Complete;
using testing::Prompt;

// A field of /proc/<pid>/status ("VmRSS" in KiB, "Threads").
long ProcStatus(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

// Connects and sends one TCP-transport frame header declaring a message of
// `declared` bytes, and nothing else; the socket, or -1.
int ConnectAndDeclare(int port, uint64_t declared) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return close(fd), -1;
  uint8_t h[32] = {};
  h[0] = 2;  // a message frame
  for (int i = 0; i < 8; ++i) h[24 + i] = uint8_t(declared >> (8 * i));
  if (send(fd, h, sizeof(h), MSG_NOSIGNAL) != ssize_t(sizeof(h))) return close(fd), -1;
  return fd;
}

TEST(HostilePeers, AThousandUnauthenticatedConnectionsDeclaring256MiBCostThePrefillEngineUnder64MiB) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/key") << "this deployment's cluster secret\n";
  const std::vector<std::string> tcp = {"--transport", "tcp", "--cluster-key-file", dir + "/key"};
  const std::string& model = testing::TinyModelPath();
  auto prefill = testing::StartPrefill(model, "bf16", tcp);
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = testing::StartServe(model, "bf16", testing::Loopback(prefill->port()), tcp);
  ASSERT_TRUE(decode->ok()) << decode->Log();
  auto colocated = testing::StartServe(model, "bf16");
  ASSERT_TRUE(colocated->ok()) << colocated->Log();
  int status = 0;
  const std::string first = Complete(decode->port(), Prompt(0), 8, &status);
  ASSERT_EQ(status, 200) << first << decode->Log();  // the real link is up

  const long rss_before = ProcStatus(prefill->pid(), "VmRSS");
  const long threads_before = ProcStatus(prefill->pid(), "Threads");
  std::vector<int> peers;
  for (int i = 0; i < 1000; ++i) {
    const int fd = ConnectAndDeclare(prefill->port(), uint64_t(256) << 20);
    if (fd >= 0) peers.push_back(fd);
  }
  // While they are open: the real decode server is served exactly.
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(Complete(decode->port(), Prompt(i), 8), Complete(colocated->port(), Prompt(i), 8)) << i;
  }
  const long rss_after = ProcStatus(prefill->pid(), "VmRSS");
  const long threads_after = ProcStatus(prefill->pid(), "Threads");
  for (int fd : peers) close(fd);
  std::printf("prefill engine under 1,000 hostile connections: resident %ld -> %ld KiB (%+ld), threads %ld -> %ld\n",
              rss_before, rss_after, rss_after - rss_before, threads_before, threads_after);
  EXPECT_EQ(peers.size(), 1000u);
  EXPECT_LT(rss_after - rss_before, 64 * 1024);
  EXPECT_LE(threads_after, threads_before);
  EXPECT_NE(prefill->Log().find("refused an unauthenticated connection: its first message declares 268435456 bytes"),
            std::string::npos) << prefill->Log();
  EXPECT_EQ(Complete(decode->port(), Prompt(5), 8), Complete(colocated->port(), Prompt(5), 8));
  EXPECT_EQ(decode->Terminate(), 0) << decode->Log();
  EXPECT_EQ(prefill->Terminate(), 0) << prefill->Log();
}

}  // namespace
}  // namespace tandem
