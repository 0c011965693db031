// HttpCore's promise that no handler ends the process: whatever a route's
// handler throws is logged, counted and answered 500 (or, for an answer
// already under way, cut off), and the server goes on serving.
#include "server/http_core.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <stdexcept>

#include "support/http_client.h"

namespace tandem {
namespace {

// Sends `request` and reads until the server closes (bounded): the raw answer.
std::string RawExchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size())) {
    const timeval tv{20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) got.append(buf, size_t(n));
  }
  close(fd);
  return got;
}

TEST(HttpCore, AHandlerThatThrowsGets500AndTheServerGoesOn) {
  HttpCore core(HttpLimits{}, AccessPolicy{});
  core.Route("POST", "/throws", [](HttpRequest&, std::shared_ptr<HttpReply>) { throw std::runtime_error("boom"); });
  core.Route("GET", "/quick-throws", [](HttpRequest&, std::shared_ptr<HttpReply>) { throw 42; }, /*quick=*/true);
  core.Route("POST", "/stream-throws", [](HttpRequest&, std::shared_ptr<HttpReply> reply) {
    reply->StartStream(200, "text/event-stream");
    reply->Write("data: one\n\n");
    throw std::out_of_range("mid-stream");
  });
  core.Route("GET", "/health", [](HttpRequest&, std::shared_ptr<HttpReply> reply) {
    reply->Send(200, "application/json", "{}");
  }, /*quick=*/true);
  ASSERT_TRUE(core.Start("127.0.0.1", 0).ok());

  const auto thrown = testing::HttpPost(core.port(), "/throws", "{}");
  EXPECT_EQ(thrown.status, 500);
  const auto e = nlohmann::json::parse(thrown.body, nullptr, false);
  ASSERT_TRUE(e.contains("error")) << thrown.body;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("boom"), std::string::npos) << thrown.body;
  EXPECT_EQ(testing::HttpGet(core.port(), "/quick-throws").status, 500);
  // A stream already under way is cut off: the client never sees a clean end
  // (read raw, so the chunked framing itself is visible).
  const std::string streamed = RawExchange(core.port(),
      "POST /stream-throws HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(streamed.rfind("HTTP/1.1 200", 0), 0u) << "the stream had begun: " << streamed;
  EXPECT_EQ(streamed.find("\r\n0\r\n\r\n"), std::string::npos) << "a cut-off stream must not end cleanly: " << streamed;
  EXPECT_EQ(testing::HttpGet(core.port(), "/health").status, 200);
  EXPECT_EQ(core.stats().handler_failures, 3);
  EXPECT_NE(core.MetricsText("t_").find("t_http_handler_failures_total 3"), std::string::npos);
  core.Stop();
}

}  // namespace
}  // namespace tandem
