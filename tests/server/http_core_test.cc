// HttpCore's promise that no handler ends the process: whatever a route's
// handler throws is logged, counted and answered 500 (or, for an answer
// already under way, cut off), and the server goes on serving.
#include "server/http_core.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <stdexcept>

#include "support/http_client.h"

namespace tandem {
namespace {

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
  // A stream already under way is cut off: the client never sees a clean end.
  std::string streamed;
  testing::HttpPostStream(core.port(), "/stream-throws", "{}", [&](const std::string& d) {
    streamed += d;
    return true;
  });
  EXPECT_EQ(streamed.find("0\r\n\r\n"), std::string::npos);
  EXPECT_EQ(testing::HttpGet(core.port(), "/health").status, 200);
  EXPECT_EQ(core.stats().handler_failures, 3);
  EXPECT_NE(core.MetricsText("t_").find("t_http_handler_failures_total 3"), std::string::npos);
  core.Stop();
}

}  // namespace
}  // namespace tandem
