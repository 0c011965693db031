// API keys and CORS on real servers: `serve` and the router of serve --disagg.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "support/http_client.h"
#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"
#include "support/wait.h"

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

int Drain(int port, const std::string& key) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  httplib::Headers h;
  if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
  auto r = cli.Post("/admin/drain", h, "", "application/json");
  return r ? r->status : 0;
}

// Invariant 10, the attack measured in issue 41: a client's API key drained
// (and so stopped) a standalone serve, and six drains spent serve --disagg's
// restart budget. Now /admin/ takes only an operator's key, and a drain is
// not a crash.
TEST(AccessE2e, AClientKeyCannotDrainAndADrainSpendsNoRestartBudget) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/keys") << "sk-test-key-1\nsk-test-key-2\n";
  std::ofstream(dir + "/admin") << "adm-operator-key-0123456789\n";
  std::ofstream(dir + "/both") << "sk-test-key-2\n";
  auto mixed = testing::RunTandem("serve -m " + testing::TinyModelPath() + " --port 0 --api-key-file " + dir +
                                      "/keys --admin-key-file " + dir + "/both", 60);
  EXPECT_EQ(mixed.exit_code, 2) << "a client key is never an operator's";
  EXPECT_NE(mixed.output.find("also a client's API key"), std::string::npos) << mixed.output;

  testing::ServerProcess serve({"serve", "-m", testing::TinyModelPath(), "--api-key-file", dir + "/keys",
                                "--admin-key-file", dir + "/admin", "--shutdown-timeout", "0.2"});
  ASSERT_TRUE(serve.ok()) << serve.Log();
  EXPECT_EQ(Drain(serve.port(), "sk-test-key-1"), 403);
  EXPECT_EQ(Drain(serve.port(), ""), 401);
  EXPECT_EQ(Drain(serve.port(), "adm-operator-key-01234567"), 401) << "a prefix of the key is not the key";
  auto health = Get(serve.port(), "/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << "refused drains change nothing";
  EXPECT_EQ(Drain(serve.port(), "adm-operator-key-0123456789"), 202);
  EXPECT_EQ(serve.WaitExit(60), std::optional<int>(0)) << serve.Log();

  // serve --disagg with a restart budget of 1: two drains of its decode
  // server would have stopped everything; they are restarts without cost.
  testing::ServerProcess disagg({"serve", "--disagg", "-m", testing::TinyModelPath(), "--api-key-file", dir + "/keys",
                                 "--admin-key-file", dir + "/admin", "--restart-budget", "1", "--shutdown-timeout",
                                 "0.2"},
                                120, "router at http://127.0.0.1:");
  ASSERT_TRUE(disagg.ok()) << disagg.Log();
  const std::string log = disagg.Log(), marker = "(decode 127.0.0.1:";
  const size_t at = log.find(marker);
  ASSERT_NE(at, std::string::npos) << log;
  const int decode = std::atoi(log.c_str() + at + marker.size());
  ASSERT_GT(decode, 0) << log;
  EXPECT_EQ(Drain(decode, "sk-test-key-1"), 403) << "the router's clients cannot drain the servers behind it";
  auto drains = [&] {
    return testing::ParseMetrics(testing::HttpGet(disagg.port(), "/metrics").body)
        ["tandem_supervisor_drains_total{child=\"decode server\"}"];
  };
  for (int i = 1; i <= 2; ++i) {
    ASSERT_EQ(Drain(decode, "adm-operator-key-0123456789"), 202) << i;
    ASSERT_TRUE(testing::WaitUntil([&] { return drains() == double(i); }, std::chrono::seconds(60)))
        << i << disagg.Log();
    ASSERT_TRUE(testing::WaitUntil([&] { return testing::HttpGet(decode, "/health").status == 200; },
                                   std::chrono::seconds(60)))
        << i << disagg.Log();
  }
  const auto metrics = testing::ParseMetrics(testing::HttpGet(disagg.port(), "/metrics").body);
  EXPECT_EQ(metrics.at("tandem_supervisor_restarts_total{child=\"decode server\"}"), 0);
  const std::string backend = "tandem_router_backend_healthy{backend=\"127.0.0.1:" + std::to_string(decode) + "\"}";
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return testing::ParseMetrics(testing::HttpGet(disagg.port(), "/metrics").body)[backend] == 1; },
      std::chrono::seconds(30)));
  ExpectKeyRules(disagg.port());  // still serving, through the restarted decode server
  EXPECT_EQ(disagg.Terminate(), 0) << disagg.Log();
}

struct Answer {
  int status = 0;
  std::string text;
  int64_t cached = -1;
};

Answer Complete(int port, const std::string& key, const std::string& cache_salt = "") {
  std::string prompt = "You are a careful assistant for the accounts team.";
  for (int i = 0; i < 40; ++i) prompt += " Rule " + std::to_string(i) + ": never guess.";
  nlohmann::json body = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
  if (!cache_salt.empty()) body["cache_salt"] = cache_salt;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto r = cli.Post("/v1/completions", {{"Authorization", "Bearer " + key}}, body.dump(), "application/json");
  Answer a;
  if (!r) return a;
  a.status = r->status;
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded()) return a.text = r->body, a;
  a.text = j["choices"][0]["text"].get<std::string>();
  a.cached = j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
  return a;
}

// Invariant 10, issue 41: reuse to the token told a client how much of its
// prompt another client had sent (usage.cached_tokens, and the time to first
// token). Prefix reuse is scoped per API key by default; a cache_salt shares
// it across keys or separates it within one; answers are the same bits
// either way. On serve and through serve --disagg (the salt crosses the
// handoff to the prefill engine).
void ExpectTenantsApart(int port) {
  const Answer first = Complete(port, "sk-test-key-1");
  ASSERT_EQ(first.status, 200) << first.text;
  EXPECT_EQ(first.cached, 0);
  const Answer again = Complete(port, "sk-test-key-1");
  EXPECT_GT(again.cached, 64) << "the same key finds its own prompt";
  const Answer other = Complete(port, "sk-test-key-2");
  EXPECT_EQ(other.cached, 0) << "another key was told the first key's prompt";
  EXPECT_EQ(other.text, first.text);
  const Answer shared_1 = Complete(port, "sk-test-key-1", "team-accounts");
  EXPECT_EQ(shared_1.cached, 0) << "a salt is its own namespace";
  const Answer shared_2 = Complete(port, "sk-test-key-2", "team-accounts");
  EXPECT_GT(shared_2.cached, 64) << "the same cache_salt shares across keys";
  EXPECT_EQ(shared_2.text, first.text);
  httplib::Client cli("127.0.0.1", port);
  auto bad = cli.Post("/v1/completions", {{"Authorization", "Bearer sk-test-key-1"}},
                      R"({"prompt":"x","max_tokens":1,"cache_salt":7})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto empty = cli.Post("/v1/completions", {{"Authorization", "Bearer sk-test-key-1"}},
                        R"({"prompt":"x","max_tokens":1,"cache_salt":""})", "application/json");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->status, 400) << empty->body;
}

TEST(AccessE2e, APromptCachedForOneKeyIsNotFoundByAnother) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/keys") << "sk-test-key-1\nsk-test-key-2\n";
  {
    testing::ServerProcess serve({"serve", "-m", testing::TinyModelPath(), "--api-key-file", dir + "/keys"});
    ASSERT_TRUE(serve.ok()) << serve.Log();
    ExpectTenantsApart(serve.port());
  }
  testing::ServerProcess disagg({"serve", "--disagg", "-m", testing::TinyModelPath(), "--api-key-file", dir + "/keys"},
                                120, "router at http://127.0.0.1:");
  ASSERT_TRUE(disagg.ok()) << disagg.Log();
  ExpectTenantsApart(disagg.port());
}

}  // namespace
}  // namespace tandem
