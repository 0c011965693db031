// Issue 26, hostile clients: no request ends a process. The router and `serve`
// answer every malformed request of a corpus with a 4xx and stay healthy; the
// nulls OpenAI's API allows mean "default" on both; regression tests named
// after the findings that once ended the router.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "support/disagg_client.h"
#include "support/http_client.h"
#include "support/server_process.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

using json = nlohmann::json;
using testing::HttpGet;
using testing::HttpPost;
using testing::ServerProcess;

// A colocated `serve` and a router in front of it: the same corpus goes to both.
class HostileClients : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    serve_ = testing::StartServe(testing::TinyModelPath(), "bf16").release();
    router_ = new ServerProcess({"router", "--decode", testing::Loopback(serve_->port())});
  }
  static void TearDownTestSuite() {
    delete router_;
    delete serve_;
    router_ = serve_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(serve_ != nullptr && serve_->ok() && router_ != nullptr && router_->ok())
        << "the servers did not start";
  }
  static std::vector<std::pair<std::string, int>> Fronts() {
    return {{"serve", serve_->port()}, {"router", router_->port()}};
  }
  static ServerProcess* serve_;
  static ServerProcess* router_;
};
ServerProcess* HostileClients::serve_ = nullptr;
ServerProcess* HostileClients::router_ = nullptr;

std::string Chat(const json& extra) {
  json body = {{"model", "tiny"}, {"messages", json::array({{{"role", "user"}, {"content", "hello"}}})},
               {"max_tokens", 4}, {"temperature", 0}};
  for (auto it = extra.begin(); it != extra.end(); ++it) body[it.key()] = it.value();
  return body.dump();
}

std::string Nested(int depth) {
  return std::string(size_t(depth), '[') + std::string(size_t(depth), ']');
}

json TooManyStops() {  // serve takes 64
  json stops = json::array();
  for (int i = 0; i < 65; ++i) stops.push_back("stop" + std::to_string(i));
  return stops;
}

// Bodies `serve` refuses with a 4xx; the router must relay or give the same.
std::vector<std::pair<std::string, std::string>> ChatCorpus() {
  std::vector<std::pair<std::string, std::string>> c = {
      {"empty body", ""},
      {"truncated JSON", "{\"messages\": ["},
      {"JSON null", "null"},
      {"JSON array", "[]"},
      {"JSON number", "123"},
      {"JSON string", "\"hello\""},
      {"invalid UTF-8 in content", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\"}]}"},
      {"overlong UTF-8", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xc0\xaf\"}]}"},
      {"lone surrogate escape", "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}"},
      {"messages nested 100,000 deep", "{\"messages\":" + Nested(100000) + "}"},
      {"tool parameters nested 100,000 deep",
       "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\",\"function\":"
       "{\"name\":\"f\",\"parameters\":" + Nested(100000) + "}}]}"},
      {"a number too large for a double", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":1e999}"},
  };
  const std::vector<std::pair<std::string, json>> fields = {
      {"messages", "hello"}, {"messages", 5}, {"messages", json::object()}, {"messages", json::array()},
      {"messages", json::array({5})}, {"messages", json::array({{{"role", 5}, {"content", "x"}}})},
      {"messages", json::array({{{"role", "user"}, {"content", 5}}})},
      {"messages", json::array({{{"role", "wizard"}, {"content", "x"}}})},
      {"stream", "yes"}, {"stream", 1}, {"stream", json::array()},
      {"temperature", "hot"}, {"temperature", -1}, {"temperature", json::object()},
      {"top_p", 2}, {"top_p", "x"}, {"top_k", -5}, {"top_k", 1.5}, {"min_p", -1},
      {"max_tokens", -1}, {"max_tokens", 0}, {"max_tokens", int64_t(1) << 40}, {"max_tokens", "10"},
      {"max_tokens", 1.5}, {"max_tokens", json::parse("18446744073709551615")},
      {"max_completion_tokens", -3},
      {"n", 0}, {"n", 17}, {"n", "2"}, {"n", json::parse("9223372036854775807")},
      {"stop", 5}, {"stop", json::array({1})}, {"stop", TooManyStops()},
      {"seed", -1}, {"seed", "x"}, {"seed", 1.5},
      {"logit_bias", "x"}, {"logit_bias", {{"abc", 1}}}, {"logit_bias", {{"1", "x"}}},
      {"logit_bias", {{"99999999", 1}}}, {"logit_bias", {{"1", 1e9}}},
      {"tools", "x"}, {"tools", json::array({5})}, {"tools", json::array({{{"type", "function"}}})},
      {"tool_choice", 5}, {"tool_choice", "sometimes"},
      {"response_format", "x"}, {"response_format", {{"type", "nope"}}},
      {"response_format", {{"type", "json_schema"}, {"json_schema", 5}}},
      {"stream_options", 5}, {"logprobs", "x"}, {"top_logprobs", 100}, {"top_logprobs", -1},
      {"frequency_penalty", 5}, {"frequency_penalty", "x"}, {"presence_penalty", -3},
      {"repetition_penalty", -1},
  };
  for (const auto& [k, v] : fields) c.emplace_back(k + " = " + v.dump(), Chat({{k, v}}));
  return c;
}

std::vector<std::pair<std::string, std::string>> CompletionCorpus() {
  std::vector<std::pair<std::string, std::string>> c;
  for (const json& prompt : {json(5), json::array({json::array({-1})}), json::array({"a", 5}),
                             json::array({99999999}), json::array({1e20}), json::object(), json()}) {
    c.emplace_back("prompt = " + prompt.dump(),
                   json({{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 2}}).dump());
  }
  c.emplace_back("echo = \"x\"", json({{"prompt", "a"}, {"echo", "x"}}).dump());
  return c;
}

void ExpectRefusedAndHealthy(const std::string& front, int port, const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& corpus) {
  for (const auto& [what, body] : corpus) {
    const auto r = HttpPost(port, path, body);
    EXPECT_GE(r.status, 400) << front << " " << path << ": " << what << " -> " << r.status << " " << r.body;
    EXPECT_LT(r.status, 500) << front << " " << path << ": " << what << " -> " << r.status << " " << r.body;
    // An OpenAI error body, whatever the request.
    const json e = json::parse(r.body, nullptr, false);
    EXPECT_TRUE(e.is_object() && e.contains("error")) << front << ": " << what << " -> " << r.body;
    ASSERT_EQ(HttpGet(port, "/health").status, 200) << front << " is not healthy after: " << what;
  }
}

TEST_F(HostileClients, RouterSurvivesStreamNull) {
  // Once: body.value("stream", false) threw on null and ended the router.
  for (const auto& [front, port] : Fronts()) {
    const auto r = HttpPost(port, "/v1/chat/completions", Chat({{"stream", nullptr}}));
    EXPECT_EQ(r.status, 200) << front << ": " << r.body;
    EXPECT_TRUE(json::parse(r.body, nullptr, false).contains("choices")) << front << ": not streamed: " << r.body;
    EXPECT_EQ(HttpGet(port, "/health").status, 200) << front;
  }
}

TEST_F(HostileClients, RouterSurvivesMessagesNested100000Deep) {
  // Once: ConversationKey dumped the first message recursively, 100,000 deep.
  const std::string body = "{\"messages\":[" + Nested(100000) + "]}";
  for (const auto& [front, port] : Fronts()) {
    const auto r = HttpPost(port, "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << front << ": " << r.body;
    EXPECT_NE(r.body.find("nests deeper than"), std::string::npos) << front << ": " << r.body;
    EXPECT_EQ(HttpGet(port, "/health").status, 200) << front;
  }
}

TEST_F(HostileClients, RouterAndServeRefuseAMalformedCorpusAndStayHealthy) {
  const auto chat = ChatCorpus();
  const auto completions = CompletionCorpus();
  for (const auto& [front, port] : Fronts()) {
    ExpectRefusedAndHealthy(front, port, "/v1/chat/completions", chat);
    ExpectRefusedAndHealthy(front, port, "/v1/completions", completions);
    // And an ordinary request is still served, equal on both.
    EXPECT_EQ(HttpPost(port, "/v1/chat/completions", Chat({})).status, 200) << front;
  }
  const auto via_serve = json::parse(HttpPost(serve_->port(), "/v1/chat/completions", Chat({})).body);
  const auto via_router = json::parse(HttpPost(router_->port(), "/v1/chat/completions", Chat({})).body);
  EXPECT_EQ(via_serve["choices"], via_router["choices"]);
}

TEST_F(HostileClients, OpenAiNullsMeanTheDefault) {
  // OpenAI's nullable fields sent as null give the answer of leaving them out.
  const json nulls = {{"stream", nullptr}, {"top_p", nullptr}, {"stop", nullptr}, {"n", nullptr},
                      {"seed", nullptr}, {"logit_bias", nullptr}, {"tools", nullptr}, {"tool_choice", nullptr},
                      {"response_format", nullptr}, {"stream_options", nullptr}, {"logprobs", nullptr},
                      {"top_logprobs", nullptr}, {"frequency_penalty", nullptr}, {"presence_penalty", nullptr},
                      {"max_completion_tokens", nullptr}, {"user", nullptr}};
  for (const auto& [front, port] : Fronts()) {
    const auto plain = HttpPost(port, "/v1/chat/completions", Chat({}));
    const auto with_nulls = HttpPost(port, "/v1/chat/completions", Chat(nulls));
    ASSERT_EQ(plain.status, 200) << front << ": " << plain.body;
    ASSERT_EQ(with_nulls.status, 200) << front << ": " << with_nulls.body;
    EXPECT_EQ(json::parse(plain.body)["choices"], json::parse(with_nulls.body)["choices"]) << front;
    // temperature and max_tokens null: their defaults (1.0; max_completion_tokens decides), still an answer.
    const auto defaults = HttpPost(port, "/v1/chat/completions",
                                   Chat({{"temperature", nullptr}, {"max_tokens", nullptr}, {"max_completion_tokens", 4}, {"seed", 3}}));
    EXPECT_EQ(defaults.status, 200) << front << ": " << defaults.body;
  }
}

}  // namespace
}  // namespace tandem
