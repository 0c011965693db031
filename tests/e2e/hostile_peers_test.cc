// Issue 26, hostile peers, as real processes on 127.0.0.1 over both
// transports: a flood of connections that never authenticate costs a prefill
// engine no thread and little memory, while a real decode server connected
// beside them keeps serving answers equal to colocated.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "support/disagg_client.h"
#include "support/http_client.h"
#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"
#include "fakes/connection_inbox.h"
#include "transfer/cluster_key.h"
#include "transfer/message_auth.h"
#include "transfer/messages.h"
#include "transfer/socket.h"
#include "transfer/handshake.h"

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

// A flood of unauthenticated peers beside a real decode server: `flood`
// opens them (and returns what must stay alive while they are open), against
// a prefill engine on `transport` with a cluster key. Measures the engine's
// resident memory and threads with the flood open, and checks the decode
// server's answers against colocated throughout.
constexpr char kClusterSecret[] = "this deployment's cluster secret";

template <typename Flood>
void FloodBesideARealDecodeServer(const std::string& transport, Flood flood,
                                  const std::vector<std::string>& expected_logs) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/key") << kClusterSecret << "\n";
  const std::vector<std::string> args = {"--transport", transport, "--cluster-key-file", dir + "/key"};
  const std::string& model = testing::TinyModelPath();
  auto prefill = testing::StartPrefill(model, "bf16", args);
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = testing::StartServe(model, "bf16", testing::Loopback(prefill->port()), args);
  ASSERT_TRUE(decode->ok()) << decode->Log();
  auto colocated = testing::StartServe(model, "bf16");
  ASSERT_TRUE(colocated->ok()) << colocated->Log();
  int status = 0;
  const std::string first = Complete(decode->port(), Prompt(0), 8, &status);
  ASSERT_EQ(status, 200) << first << decode->Log();  // the real link is up

  const long rss_before = ProcStatus(prefill->pid(), "VmRSS");
  const long threads_before = ProcStatus(prefill->pid(), "Threads");
  // The peak while the flood is sent, not only what stays: an eager message
  // is reassembled, refused and freed within the flood.
  std::atomic<bool> flooding{true};
  std::atomic<long> rss_peak{rss_before};
  std::thread sampler([&] {
    while (flooding.load()) {
      rss_peak.store(std::max(rss_peak.load(), ProcStatus(prefill->pid(), "VmRSS")));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a sampling period, not a synchronization
    }
  });
  {
    auto open = flood(prefill->port());
    flooding.store(false);
    sampler.join();
    ASSERT_EQ(open.connections, 1000) << prefill->Log();
    // While they are open: the real decode server is served exactly.
    for (int i = 1; i <= 4; ++i) {
      EXPECT_EQ(Complete(decode->port(), Prompt(i), 8), Complete(colocated->port(), Prompt(i), 8)) << i;
    }
    const long rss_after = ProcStatus(prefill->pid(), "VmRSS");
    const long threads_after = ProcStatus(prefill->pid(), "Threads");
    std::printf("prefill engine (%s) under 1,000 hostile connections: resident %ld -> %ld KiB (%+ld; peak %+ld while "
                "they were opened), threads %ld -> %ld\n",
                transport.c_str(), rss_before, rss_after, rss_after - rss_before, rss_peak.load() - rss_before,
                threads_before, threads_after);
#if !defined(TANDEM_SANITIZED)
    // (Under the sanitizers, freed memory waits in ASan's quarantine and
    // shadow memory grows with it: the bound is the Release run's to check.)
    EXPECT_LT(rss_after - rss_before, 64 * 1024);
    EXPECT_LT(rss_peak.load() - rss_before, 64 * 1024);
#endif
    EXPECT_LE(threads_after, threads_before);
  }
  for (const std::string& expected_log : expected_logs) {
    EXPECT_NE(prefill->Log().find(expected_log), std::string::npos) << expected_log << "\n" << prefill->Log();
  }
  EXPECT_EQ(Complete(decode->port(), Prompt(5), 8), Complete(colocated->port(), Prompt(5), 8));
  EXPECT_EQ(decode->Terminate(), 0) << decode->Log();
  EXPECT_EQ(prefill->Terminate(), 0) << prefill->Log();
}

// Raw sockets, each declaring 256 MiB in a TCP-transport frame header.
struct SocketFlood {
  int connections = 0;
  std::vector<int> fds;
  ~SocketFlood() {
    for (int fd : fds) close(fd);
  }
};

TEST(HostilePeers, AThousandUnauthenticatedConnectionsDeclaring256MiBCostThePrefillEngineUnder64MiB) {
  FloodBesideARealDecodeServer(
      "tcp",
      [](int port) {
        SocketFlood f;
        for (int i = 0; i < 1000; ++i) {
          const int fd = ConnectAndDeclare(port, uint64_t(256) << 20);
          if (fd >= 0) f.fds.push_back(fd);
        }
        f.connections = int(f.fds.size());
        return f;
      },
      {"refused an unauthenticated connection: its first message declares 268435456 bytes"});
}

// A UCX worker of its own (the hostile peer's), with one endpoint per
// connection, each sending tandem's message id one active message of
// `declared` bytes: by rendezvous (the engine sees the size before any byte,
// and would fetch it into a buffer of that size), or eagerly (every byte
// sent: UCX reassembles the fragments before any screen sees them). `knock`:
// the worker's client id, sent with each connection request (0: none).
class UcxFlood {
 public:
  UcxFlood(int port, int n, size_t declared, uint64_t knock, bool eager) : declared_(declared) {
    ucp_config_t* config = nullptr;
    if (ucp_config_read(nullptr, nullptr, &config) != UCS_OK) return;
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_AM;
    const bool ok = ucp_init(&params, config, &context_) == UCS_OK;
    ucp_config_release(config);
    if (!ok) return;
    ucp_worker_params_t wp{};
    if (knock != 0) {
      wp.field_mask = UCP_WORKER_PARAM_FIELD_CLIENT_ID;
      wp.client_id = knock;
    }
    if (ucp_worker_create(context_, &wp, &worker_) != UCS_OK) return;
    // Never touched: the pages are only reserved.
    buffer_ = mmap(nullptr, declared, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (buffer_ == MAP_FAILED) return;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(uint16_t(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < n; ++i) {
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
      ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER | (knock != 0 ? UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID : 0);
      ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
      ep.sockaddr.addrlen = sizeof(sa);
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = [](void*, ucp_ep_h, ucs_status_t) {};  // refused: expected
      ucp_ep_h h = nullptr;
      if (ucp_ep_create(worker_, &ep, &h) != UCS_OK) continue;
      eps_.push_back(h);
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_AM_SEND_FLAG_REPLY | (eager ? UCP_AM_SEND_FLAG_EAGER : UCP_AM_SEND_FLAG_RNDV);
      ucs_status_ptr_t r = ucp_am_send_nbx(h, 7, nullptr, 0, buffer_, declared_, &p);
      if (UCS_PTR_IS_PTR(r)) sends_.push_back(r);
      ucp_worker_progress(worker_);
    }
    connections = int(eps_.size());
    // Until every declaration has been answered (refused) or 20 s.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      ucp_worker_progress(worker_);
      std::erase_if(sends_, [](void* r) {
        if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
        ucp_request_free(r);
        return true;
      });
      if (sends_.empty()) break;
    }
  }
  UcxFlood(UcxFlood&& o) noexcept
      : connections(o.connections),
        declared_(o.declared_),
        context_(std::exchange(o.context_, nullptr)),
        worker_(std::exchange(o.worker_, nullptr)),
        buffer_(std::exchange(o.buffer_, MAP_FAILED)),
        eps_(std::move(o.eps_)),
        sends_(std::move(o.sends_)) {}
  ~UcxFlood() {
    for (void* r : sends_) {
      ucp_request_cancel(worker_, r);
      ucp_request_free(r);
    }
    for (ucp_ep_h h : eps_) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t r = ucp_ep_close_nbx(h, &p);
      if (UCS_PTR_IS_PTR(r)) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
        ucp_request_free(r);
      }
    }
    if (buffer_ != MAP_FAILED) munmap(buffer_, declared_);
    if (worker_) ucp_worker_destroy(worker_);
    if (context_) ucp_cleanup(context_);
  }
  int connections = 0;

 private:
  size_t declared_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  void* buffer_ = MAP_FAILED;
  std::vector<ucp_ep_h> eps_;
  std::vector<void*> sends_;
};

// Two floods at once. 1,000 connections that carry the cluster key's knock
// (read off the wire, say) and declare 256 MiB by rendezvous: the listener's
// gate refuses each declaration unfetched. And 8 without the knock, each
// sending 64 MiB eagerly: UCX would reassemble each whole before the gate saw
// it (+432 MiB measured before the knock), but their connection requests are
// rejected before an endpoint exists.
TEST(HostilePeers, AThousandUnauthenticatedUcxConnectionsDeclaring256MiBCostThePrefillEngineUnder64MiB) {
  const uint64_t knock = transfer::ClusterKey::FromSecret(kClusterSecret).value().Knock();
  struct Floods {
    UcxFlood knocked, unknocked;
    int connections;
  };
  FloodBesideARealDecodeServer(
      "shm",
      [knock](int port) {
        UcxFlood knocked(port, 1000, size_t(256) << 20, knock, /*eager=*/false);
        UcxFlood unknocked(port, 8, size_t(64) << 20, 0, /*eager=*/true);
        const int n = knocked.connections;
        return Floods{std::move(knocked), std::move(unknocked), n};
      },
      {"refused an unauthenticated connection: its first message declares 268435456 bytes",
       "refused an unauthenticated connection: its connection request does not carry the cluster key's knock"});
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

using transfer::ClusterKey;

// The hostile-peer harness's side of one connection over the TCP transport:
// connects (or is connected to), collects what arrives, bounded waits.
struct HarnessPeer {
  testing::ConnectionInbox inbox;
  transfer::SocketTransport transport;
  std::shared_ptr<transfer::Connection> conn;
  std::optional<std::vector<uint8_t>> Next(std::chrono::seconds limit = std::chrono::seconds(20)) {
    std::unique_lock<std::mutex> lock(inbox.mu);
    if (!inbox.cv.wait_for(lock, limit, [&] { return !inbox.messages.empty() || inbox.closed; })) return std::nullopt;
    if (inbox.messages.empty()) return std::nullopt;
    auto m = std::move(inbox.messages.front());
    inbox.messages.pop_front();
    return m;
  }
};

TEST(HostilePeers, AHelloMeantForAnotherPrefillEngineOrSentAgainIsRefusedAsAReplay) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/key") << "this deployment's cluster secret\n";
  auto key = ClusterKey::Load(dir + "/key");
  ASSERT_TRUE(key.ok());
  auto prefill = testing::StartPrefill(testing::TinyModelPath(), "bf16",
                                       {"--transport", "tcp", "--cluster-key-file", dir + "/key"});
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  const std::string address = testing::Loopback(prefill->port());
  // A refused Hello is answered with the engine's own: its layout and model.
  Hello engine;
  {
    HarnessPeer probe;
    auto c = probe.transport.Connect(address, probe.inbox.Handlers());
    ASSERT_TRUE(c.ok());
    ASSERT_TRUE((*c)->Send(Hello{"decode", "no layout", "no model", 1, 0, {}, {}, ""}.Encode()).ok());
    auto m = probe.Next();
    ASSERT_TRUE(m.has_value()) << prefill->Log();
    engine = *Hello::Decode(*m);
  }
  auto hello_to = [&](const std::string& target) {
    Hello h{"decode", engine.layout_fingerprint, engine.weights_identity, transfer::NewInstanceId(), 0, {}, {}, target,
            engine.numerics};
    transfer::SignDecodeHello(*key, &h);
    return h;
  };
  auto send = [&](const Hello& h) {
    auto peer = std::make_unique<HarnessPeer>();
    auto c = peer->transport.Connect(address, peer->inbox.Handlers());
    EXPECT_TRUE(c.ok());
    EXPECT_TRUE((*c)->Send(h.Encode()).ok());
    peer->conn = *c;
    return peer;
  };
  // Captured on its way to another engine (another port): refused, and said why.
  const Hello elsewhere = hello_to("127.0.0.1:" + std::to_string(prefill->port() + 1));
  auto refused = send(elsewhere);
  EXPECT_TRUE(refused->inbox.WaitClosed());
  // Meant for this engine: answered with a proof of the key.
  const Hello here = hello_to(address);
  auto accepted = send(here);
  auto answer = accepted->Next();
  ASSERT_TRUE(answer.has_value());
  auto theirs = Hello::Decode(*answer);
  ASSERT_TRUE(theirs.ok());
  EXPECT_TRUE(transfer::CheckPrefillHello(*key, here.nonce, *theirs).ok());
  // The same Hello again: a replay.
  auto again = send(here);
  EXPECT_TRUE(again->inbox.WaitClosed());
  {
    std::lock_guard<std::mutex> lock(accepted->inbox.mu);
    EXPECT_FALSE(accepted->inbox.closed) << "the live connection is not dropped as stale";
  }
  // And it still works: a sealed heartbeat is taken (a dropped one would close it).
  transfer::MessageAuth session(*key, here.nonce, theirs->nonce, /*decode_side=*/true);
  ASSERT_TRUE(session.SealAndSend(*accepted->conn, Heartbeat{here.instance_id}.Encode()).ok());
  EXPECT_FALSE(accepted->inbox.WaitClosedFor(std::chrono::milliseconds(300)));
  const std::string log = prefill->Log();
  EXPECT_NE(log.find("was meant for 127.0.0.1:" + std::to_string(prefill->port() + 1) + ", not this engine"),
            std::string::npos) << log;
  EXPECT_NE(log.find("its Hello repeats one already seen (a replay)"), std::string::npos) << log;
  EXPECT_EQ(prefill->Terminate(), 0) << prefill->Log();
}

// A fake prefill engine that holds the key answers a real decode server's
// Hello properly, then sends an AbortAck that is not sealed with the
// connection's session (forged): the decode server closes the link and says why.
TEST(HostilePeers, AForgedAbortAckIsRefusedAndTheLinkClosedWithTheReason) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/key") << "this deployment's cluster secret\n";
  auto key = ClusterKey::Load(dir + "/key");
  ASSERT_TRUE(key.ok());
  HarnessPeer fake;
  std::mutex mu;
  std::condition_variable cv;
  ASSERT_TRUE(fake.transport.Listen("127.0.0.1:0", [&](std::shared_ptr<transfer::Connection> c) {
    std::lock_guard<std::mutex> lock(mu);
    fake.conn = c;
    cv.notify_all();
    return fake.inbox.Handlers();
  }).ok());
  // The decode server waits at start-up for its link: answer while it starts.
  auto starting = std::async(std::launch::async, [&] {
    return testing::StartServe(testing::TinyModelPath(), "bf16", testing::Loopback(fake.transport.listen_port()),
                               {"--transport", "tcp", "--cluster-key-file", dir + "/key"});
  });
  auto m = fake.Next();
  ASSERT_TRUE(m.has_value());
  auto hello = Hello::Decode(*m);
  ASSERT_TRUE(hello.ok());
  ASSERT_TRUE(transfer::CheckDecodeHello(*key, *hello, nullptr, testing::Loopback(fake.transport.listen_port())).ok());
  Hello mine{"prefill", hello->layout_fingerprint, hello->weights_identity, transfer::NewInstanceId(),
             hello->instance_id, {}, {}, "", hello->numerics};
  const std::vector<uint8_t> my_nonce = transfer::SignPrefillHello(*key, *hello, &mine);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return fake.conn != nullptr; }));
  }
  ASSERT_TRUE(fake.conn->Send(mine.Encode()).ok());
  auto decode = starting.get();
  ASSERT_TRUE(decode->ok()) << decode->Log();
  // A genuine sealed heartbeat first (the session works), then the forgery:
  // an AbortAck sealed under a session derived from another key.
  transfer::MessageAuth real(*key, hello->nonce, my_nonce, /*decode_side=*/false);
  ASSERT_TRUE(real.SealAndSend(*fake.conn, Heartbeat{mine.instance_id}.Encode()).ok());
  auto other = ClusterKey::FromSecret("not this deployment's secret");
  transfer::MessageAuth forged(*other, hello->nonce, my_nonce, /*decode_side=*/false);
  ASSERT_TRUE(forged.SealAndSend(*fake.conn, AbortAck{12345}.Encode()).ok());
  EXPECT_TRUE(fake.inbox.WaitClosed()) << decode->Log();
  const std::string log = decode->Log();
  EXPECT_NE(log.find("closing the connection to prefill engine"), std::string::npos) << log;
  EXPECT_NE(log.find("authentication does not verify"), std::string::npos) << log;
  EXPECT_EQ(decode->Terminate(), 0) << decode->Log();
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// Authenticated by default: an engine without a key refuses to start unless
// asked by name, and then only on loopback addresses.
TEST(HostilePeers, EnginesWithoutAClusterKeyRefuseToStartUnlessInsecureByNameOnLoopback) {
  const std::string model = " -m " + testing::TinyModelPath();
  auto r = testing::RunTandem("prefill" + model + " --port 0", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tandem prefill needs --cluster-key-file"), std::string::npos) << r.output;
  r = testing::RunTandem("prefill" + model + " --host 0.0.0.0 --port 0 --insecure-no-cluster-key", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("refused on 0.0.0.0:0, which is not a loopback address"), std::string::npos) << r.output;
  r = testing::RunTandem("serve" + model + " --port 0 --prefill 127.0.0.1:1", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("tandem serve --prefill needs --cluster-key-file"), std::string::npos) << r.output;
  // Never dialed: refused before any connection is made.
  r = testing::RunTandem("serve" + model + " --port 0 --prefill 127.0.0.1:1,192.0.2.1:7000 --insecure-no-cluster-key", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("refused on 192.0.2.1:7000"), std::string::npos) << r.output;
  // On loopback, by name: it runs, and says loudly what it is.
  auto insecure = testing::StartPrefill(testing::TinyModelPath(), "bf16", {"--insecure-no-cluster-key"});
  ASSERT_TRUE(insecure->ok()) << insecure->Log();
  EXPECT_NE(insecure->Log().find("WARNING: --insecure-no-cluster-key"), std::string::npos) << insecure->Log();
}

}  // namespace
}  // namespace tandem
