// API keys and CORS on real servers: `serve` and the router of serve --disagg.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

httplib::Result Get(int port, const std::string& path, httplib::Headers headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  return cli.Get(path.c_str(), headers);
}

void ExpectKeyRules(int port) {
  const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3})";
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto none = cli.Post("/v1/chat/completions", body, "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer");
  const auto err = nlohmann::json::parse(none->body);
  EXPECT_EQ(err["error"]["code"], "invalid_api_key") << none->body;
  auto wrong = cli.Post("/v1/chat/completions", {{"Authorization", "Bearer sk-not-the-key"}}, body, "application/json");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto right = cli.Post("/v1/chat/completions", {{"Authorization", "Bearer sk-test-key-2"}}, body, "application/json");
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200) << right->body;
  auto models = Get(port, "/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto health = Get(port, "/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  // A refused request's body is read, not left on the connection to be taken
  // for the next request: the next one on the same kept-alive connection is
  // answered as itself.
  httplib::Client reused("127.0.0.1", port);
  reused.set_keep_alive(true);
  const std::string smuggled = "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test-key-1\r\n\r\n";
  auto refused = reused.Post("/v1/completions", smuggled, "text/plain");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  auto next = reused.Get("/health");
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
  EXPECT_NE(next->body.find("ok"), std::string::npos) << next->body;
}

TEST(AccessE2e, ServeAndTheRouterRequireTheKeyAndSendCorsOnlyWhenAsked) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/keys") << "sk-test-key-1\nsk-test-key-2\n";
  testing::ServerProcess open({"serve", "-m", testing::TinyModelPath()});
  ASSERT_TRUE(open.ok()) << open.Log();
  auto plain = Get(open.port(), "/v1/models", {{"Origin", "https://app.example"}});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 200);
  EXPECT_FALSE(plain->has_header("Access-Control-Allow-Origin")) << "no CORS without --cors-origin";

  testing::ServerProcess keyed({"serve", "-m", testing::TinyModelPath(), "--api-key-file", dir + "/keys",
                                "--cors-origin", "https://app.example"});
  ASSERT_TRUE(keyed.ok()) << keyed.Log();
  ExpectKeyRules(keyed.port());
  httplib::Client cli("127.0.0.1", keyed.port());
  auto preflight = cli.Options("/v1/chat/completions",
                               {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->status, 204);
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  EXPECT_EQ(preflight->get_header_value("Access-Control-Allow-Headers"), "Authorization, Content-Type");
  // The official JS client's own headers (x-stainless-*) are allowed for the trusted origin.
  auto sdk = cli.Options("/v1/chat/completions", {{"Origin", "https://app.example"},
                                                  {"Access-Control-Request-Headers", "authorization, x-stainless-os"}});
  ASSERT_TRUE(sdk);
  EXPECT_EQ(sdk->status, 204);
  EXPECT_EQ(sdk->get_header_value("Access-Control-Allow-Headers"), "authorization, x-stainless-os");
  auto other = cli.Options("/v1/chat/completions", {{"Origin", "https://evil.example"}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 403);
  EXPECT_FALSE(other->has_header("Access-Control-Allow-Origin"));
  auto from_app = Get(keyed.port(), "/v1/models", {{"Origin", "https://app.example"}, {"Authorization", "Bearer sk-test-key-1"}});
  ASSERT_TRUE(from_app);
  EXPECT_EQ(from_app->status, 200);
  EXPECT_EQ(from_app->get_header_value("Access-Control-Allow-Origin"), "https://app.example");

  auto bad = testing::RunTandem("serve -m " + testing::TinyModelPath() + " --port 0 --api-key short", 60);
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("at least 8 characters"), std::string::npos) << bad.output;
  auto unset = testing::RunTandem("serve -m " + testing::TinyModelPath() + " --port 0 --api-key ''", 60);
  EXPECT_EQ(unset.exit_code, 2) << "an empty --api-key must not start an open server";
  EXPECT_NE(unset.output.find("empty key"), std::string::npos) << unset.output;

  // serve --disagg: the router checks the key and passes it on to its decode server.
  testing::ServerProcess disagg({"serve", "--disagg", "-m", testing::TinyModelPath(), "--api-key-file", dir + "/keys"},
                                120, "router at http://127.0.0.1:");
  ASSERT_TRUE(disagg.ok()) << disagg.Log();
  ExpectKeyRules(disagg.port());
  EXPECT_EQ(disagg.Terminate(), 0) << disagg.Log();
}

}  // namespace
}  // namespace tandem
