// The front door (server/http_core.h) under the clients of issue 15, on real
// processes: `tandem bench frontdoor` against serve, and against a router in
// front of serve. 2,000 concurrent streams equal to their answers alone,
// /health answering throughout, 500 slowloris connections closed at their
// deadline while a real request is served, a 1 GiB chunked body refused
// without buffering it, and 100 non-streaming clients that hang up cancelled
// with their pages freed. Bounds on times here are loose (shared, noisy
// machines, sanitizer builds): the measured numbers are in the bench's report.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"
#include "support/wait.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

const std::vector<std::string> kLimits = {"--header-timeout", "2", "--body-timeout", "2"};

// How long /health may take while 2,000 streams run. Under the sanitizers (CI
// runs this there too, beside another test on two cores) the server is several
// times slower: one probe in 1,611 once took the whole 2 s there.
#if defined(TANDEM_SANITIZED)
constexpr int kHealthLimitS = 6;
#else
constexpr int kHealthLimitS = 2;
#endif

Json RunBench(int port, int engine_port, const std::string& dir) {
  const std::string json = dir + "/frontdoor.json";
  auto run = testing::RunTandem("bench frontdoor --url 127.0.0.1:" + std::to_string(port) + " --engine-port " +
                                    std::to_string(engine_port) +
                                    " --idle 1000 --streams 2000 --prompts 200 --max-tokens 16 --slowloris 500"
                                    " --big-body-bytes 1073741824 --hang-ups 100 --hang-up-max-tokens 3000"
                                    " --phase-timeout 240 --health-timeout " + std::to_string(kHealthLimitS) +
                                    " --json " + json,
                                900);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(json);
  Json r = Json::parse(in, nullptr, false);
  EXPECT_TRUE(r.is_object()) << run.output;
  std::printf("%s\n", run.output.c_str());
  return r.is_object() ? r : Json::object();
}

void ExpectFrontDoorHolds(const Json& r) {
  ASSERT_TRUE(r.contains("streams")) << r.dump();
  EXPECT_EQ(r["error"], "");
  EXPECT_GE(r["idle"]["held"].get<int64_t>(), 1000) << "every idle connection is held";
  const Json& s = r["streams"];
  EXPECT_EQ(s["ok"], 2000) << s.dump();
  EXPECT_EQ(s["equal_to_alone"], 2000) << "every stream gets all its tokens, equal to its answer alone";
  EXPECT_GT(s["health_probes"].get<int64_t>(), 0);
  EXPECT_EQ(s["health_failed"], 0) << "/health answers throughout";
  EXPECT_LT(s["health_max_ms"].get<double>(), kHealthLimitS * 1000.0) << s.dump();
  const Json& slow = r["slowloris"];
  EXPECT_EQ(slow["closed"], 500) << slow.dump();
  EXPECT_EQ(slow["got_408"], 500) << "each is told why";
  EXPECT_EQ(slow["open_at_end"], 0);
  EXPECT_GE(slow["closed_after_s_min"].get<double>(), 1.9) << "not before their 2 s deadline";
  EXPECT_LT(slow["closed_after_s_max"].get<double>(), 12.0) << "and not long after it";
  EXPECT_EQ(slow["request_status"], 200) << "a real request is served meanwhile";
  EXPECT_LT(slow["request_ms"].get<double>(), 5000) << slow.dump();
  const Json& big = r["big_body"];
  EXPECT_EQ(big["status"], 413) << big.dump();
  EXPECT_LT(big["rss_growth_mib"].get<double>(), 64.0) << "the body is not buffered";
  const Json& h = r["hang_ups"];
  EXPECT_EQ(h["running"], 100) << h.dump();
  EXPECT_EQ(h["cancelled"], 100) << "every hung-up request is cancelled";
  EXPECT_GE(h["settled_ms"].get<double>(), 0) << "nothing runs and no page is used afterwards";
  EXPECT_LT(h["settled_ms"].get<double>(), 5000);
  EXPECT_EQ(h["pages_used_after"], 0);
}

std::vector<std::string> ServeArgs() {
  std::vector<std::string> a = {"serve", "-m", testing::TinyModelPath(), "--max-waiting", "4096", "--max-running", "256",
                                "--no-prefix-cache"};
  a.insert(a.end(), kLimits.begin(), kLimits.end());
  return a;
}

TEST(FrontDoor, ServeHoldsThousandsOfStreamsAndShedsHostileClients) {
  const std::string dir = testing::MakeTempDir();
  testing::ServerProcess serve(ServeArgs());
  ASSERT_TRUE(serve.ok()) << serve.Log();
  ExpectFrontDoorHolds(RunBench(serve.port(), serve.port(), dir));
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
}

TEST(FrontDoor, TheRouterHoldsThousandsOfStreamsAndShedsHostileClients) {
  const std::string dir = testing::MakeTempDir();
  testing::ServerProcess serve(ServeArgs());
  ASSERT_TRUE(serve.ok()) << serve.Log();
  std::vector<std::string> args = {"router", "--decode", "127.0.0.1:" + std::to_string(serve.port())};
  args.insert(args.end(), kLimits.begin(), kLimits.end());
  testing::ServerProcess router(args);
  ASSERT_TRUE(router.ok()) << router.Log();
  ExpectFrontDoorHolds(RunBench(router.port(), serve.port(), dir));
  EXPECT_EQ(router.Terminate(), 0) << router.Log();
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
}

// One raw connection: what it sends and everything it reads until the server
// closes it or `quiet_ms` pass without a byte.
std::string Exchange(int port, const std::string& send, int quiet_ms = 1500) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return "connect failed";
  for (size_t off = 0; off < send.size();) {
    const ssize_t n = ::send(fd, send.data() + off, send.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server answered and closed: read what it said
    off += size_t(n);
  }
  std::string got;
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, quiet_ms) > 0) {
    char buf[4096];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  ::close(fd);
  return got;
}

int CountOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// HTTP framing the event-driven server reads itself: each case gets its own
// answer, and a kept-alive connection stays in step after it.
TEST(FrontDoor, FramingEdgesAreAnsweredAndConnectionsStayInStep) {
  testing::ServerProcess serve({"serve", "-m", testing::TinyModelPath()});
  ASSERT_TRUE(serve.ok()) << serve.Log();
  const int port = serve.port();
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  // Pipelined requests are answered in order.
  std::string got = Exchange(port, health + health + health, 500);
  EXPECT_EQ(CountOf(got, "HTTP/1.1 200 OK"), 3) << got;
  // HEAD gets the head only, and the next request on the connection is answered as itself.
  got = Exchange(port, "HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n" + health, 500);
  EXPECT_EQ(CountOf(got, "HTTP/1.1 200 OK"), 2) << got;
  EXPECT_EQ(CountOf(got, "{\"status\":\"ok\"}"), 1) << "the HEAD answer carries no body: " << got;
  // A chunk line that never ends cannot grow the server's buffer: 413.
  got = Exchange(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
                           std::string(size_t(1) << 20, 'a'));
  EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got.substr(0, 300);
  EXPECT_NE(got.find("chunk header"), std::string::npos) << got.substr(0, 300);
  // Headers over 64 KiB: 431.
  got = Exchange(port, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(size_t(70) << 10, 'b') + "\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 431", 0), 0u) << got.substr(0, 300);
  // A declared body over the limit is refused before it is sent.
  got = Exchange(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999\r\n"
                       "Expect: 100-continue\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got.substr(0, 300);
  // Expect: 100-continue is honoured for an acceptable body.
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  got = Exchange(port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Expect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  EXPECT_EQ(got.rfind("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK", 0), 0u) << got.substr(0, 300);
  // Garbage: 400 in OpenAI's shape.
  got = Exchange(port, "NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 400", 0), 0u) << got.substr(0, 300);
  EXPECT_NE(got.find("\"error\""), std::string::npos) << got;
  EXPECT_EQ(Exchange(port, health, 500).rfind("HTTP/1.1 200", 0), 0u) << "and the server is still healthy";
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
}

// Past --max-connections only the quick routes (/health, /metrics, /v1/models) are served; anything else
// gets 503 with Retry-After, and the server recovers when connections close.
TEST(FrontDoor, PastTheConnectionCapOnlyProbesAreServed) {
  testing::ServerProcess serve({"serve", "-m", testing::TinyModelPath(), "--max-connections", "8"});
  ASSERT_TRUE(serve.ok()) << serve.Log();
  std::vector<int> held;
  for (int i = 0; i < 8; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(serve.port()));
    ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    held.push_back(fd);
  }
  // Until the server has accepted them all.
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        const std::string m = Exchange(serve.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 300);
        return m.find("tandem_http_open_connections 9") != std::string::npos;
      },
      std::chrono::seconds(10), std::chrono::milliseconds(20)));
  std::string got = Exchange(serve.port(), "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  const std::string completion = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                 "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  got = Exchange(serve.port(), completion);
  EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
  EXPECT_NE(got.find("Retry-After: 1"), std::string::npos) << got;
  EXPECT_NE(got.find("too many open connections"), std::string::npos) << got;
  for (int fd : held) ::close(fd);
  const bool served = testing::WaitUntil(
      [&] { return Exchange(serve.port(), completion, 300).rfind("HTTP/1.1 200", 0) == 0; }, std::chrono::seconds(10),
      std::chrono::milliseconds(20));
  EXPECT_TRUE(served) << "served again once the connections closed";
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
}

}  // namespace
}  // namespace tandem
