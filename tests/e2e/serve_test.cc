// `tandem serve` as a real process on 127.0.0.1, driven over HTTP.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <atomic>
#include <future>
#include <thread>

#include "support/http_client.h"
#include "support/paths.h"
#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"
#include "support/wait.h"

namespace tandem {
namespace {

using json = nlohmann::json;
using testing::HttpGet;
using testing::HttpResult;
using testing::HttpPost;
using testing::HttpPostStream;
using testing::ParseMetrics;
using testing::ServerProcess;
using testing::SseData;

class Serve : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = &testing::TinyModelPath();
    ASSERT_FALSE(model_->empty());
  }
  static std::vector<std::string> Args(std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"serve", "-m", *model_, "--model-id", "tiny", "--cache-tokens", "16384"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  static const std::string* model_;
};
const std::string* Serve::model_ = nullptr;

json ChatBody(const std::string& user, int max_tokens, bool stream) {
  return json{{"model", "tiny"},
              {"messages", json::array({{{"role", "user"}, {"content", user}}})},
              {"max_tokens", max_tokens},
              {"temperature", 0},
              {"stream", stream},
              {"stream_options", {{"include_usage", true}}}};
}

struct StreamResult {
  std::string text, finish;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  bool done = false;
};

StreamResult ParseStream(const std::string& body) {
  StreamResult r;
  for (const std::string& d : SseData(body)) {
    if (d == "[DONE]") {
      r.done = true;
      continue;
    }
    const json j = json::parse(d);
    if (j.contains("usage") && j["usage"].is_object()) {
      r.prompt_tokens = j["usage"]["prompt_tokens"];
      r.completion_tokens = j["usage"]["completion_tokens"];
    }
    for (const auto& c : j["choices"]) {
      if (c["delta"].contains("content") && c["delta"]["content"].is_string()) r.text += c["delta"]["content"];
      if (c["finish_reason"].is_string()) r.finish = c["finish_reason"];
    }
  }
  return r;
}

std::map<std::string, double> Metrics(int port) {
  auto r = HttpGet(port, "/metrics");
  EXPECT_EQ(r.status, 200);
  return ParseMetrics(r.body);
}

void WaitIdle(int port) {
  EXPECT_TRUE(testing::WaitUntil(
      [&] {
        auto m = Metrics(port);
        return m["tandem_requests_running"] == 0 && m["tandem_requests_waiting"] == 0;
      },
      std::chrono::seconds(6), std::chrono::milliseconds(20)))
      << "server did not become idle";
}

TEST_F(Serve, ThirtyTwoConcurrentStreamsMatchSingleRequestsAndMetricsAddUp) {
  ServerProcess server(Args());
  ASSERT_TRUE(server.ok()) << server.Log();
  ASSERT_EQ(HttpGet(server.port(), "/health").status, 200);
  // Reference: each prompt alone (one request at a time).
  std::vector<std::string> prompts, alone;
  for (int i = 0; i < 32; ++i) prompts.push_back("Tell me story number " + std::to_string(i * 37) + " please");
  for (int i = 0; i < 32; ++i) {
    auto r = HttpPost(server.port(), "/v1/chat/completions", ChatBody(prompts[size_t(i)], 24, false).dump());
    ASSERT_EQ(r.status, 200) << r.body;
    alone.push_back(json::parse(r.body)["choices"][0]["message"]["content"].get<std::string>());
  }
  std::vector<std::future<StreamResult>> futures;
  for (int i = 0; i < 32; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      std::string body;
      const int status = HttpPostStream(server.port(), "/v1/chat/completions",
                                        ChatBody(prompts[size_t(i)], 24, true).dump(),
                                        [&](const std::string& d) { return body += d, true; });
      EXPECT_EQ(status, 200);
      return ParseStream(body);
    }));
  }
  int64_t prompt_total = 0, completion_total = 0;
  for (int i = 0; i < 32; ++i) {
    const StreamResult r = futures[size_t(i)].get();
    EXPECT_TRUE(r.done) << i;
    EXPECT_EQ(r.text, alone[size_t(i)]) << "stream " << i << " differs from its single-request result";
    prompt_total += r.prompt_tokens;
    completion_total += r.completion_tokens;
  }
  WaitIdle(server.port());
  auto m = Metrics(server.port());
  EXPECT_EQ(m["tandem_requests_total{outcome=\"finished\"}"], 64);
  EXPECT_EQ(m["tandem_generated_tokens_total"], 2 * completion_total);
  EXPECT_EQ(m["tandem_prompt_tokens_total"], 2 * prompt_total);
  EXPECT_EQ(m["tandem_time_to_first_token_seconds_count"], 64);
  EXPECT_EQ(m["tandem_cache_pages{state=\"used\"}"], m["tandem_prefix_cache_pages"])
      << "only the prefix cache holds pages when idle";
  EXPECT_EQ(m["tandem_cache_pages{state=\"reserved\"}"], 0);
  EXPECT_EQ(server.Terminate(), 0) << "SIGTERM must exit 0\n" << server.Log();
}

TEST_F(Serve, BadInputsGetClearErrorsAndTheServerStaysHealthy) {
  ServerProcess server(Args({"--max-body-bytes", "100000", "--ctx-size", "512"}));
  ASSERT_TRUE(server.ok()) << server.Log();
  const int port = server.port();
  struct Case {
    std::string name, body;
    int status;
    std::string message;
  };
  const std::string long_prompt(20000, 'a');
  const std::vector<Case> cases = {
      {"malformed JSON", "{\"messages\": [", 400, "not valid JSON"},
      {"wrong type", R"({"messages": [{"role":"user","content":"hi"}], "max_tokens": "ten"})", 400, "max_tokens"},
      {"unknown model", R"({"model":"gpt-9","messages":[{"role":"user","content":"hi"}]})", 404, "gpt-9"},
      {"prompt too long", json{{"messages", json::array({{{"role", "user"}, {"content", std::string(4000, 'z') + " end"}}})}}.dump(), 400, "context"},
      {"max_tokens range", R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":0})", 400, "max_tokens"},
      {"invalid UTF-8", std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"caf\xC3\x28\"}]}"), 400, "UTF-8"},
      {"body too large", json{{"messages", json::array({{{"role", "user"}, {"content", std::string(200000, 'x')}}})}}.dump(), 413, "too large"},
  };
  for (const Case& c : cases) {
    auto r = HttpPost(port, "/v1/chat/completions", c.body);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.body;
    json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << c.name << " error body is not JSON: " << r.body;
    ASSERT_TRUE(j.contains("error")) << c.name;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.message), std::string::npos)
        << c.name << ": " << j["error"]["message"];
  }
  EXPECT_EQ(HttpGet(port, "/health").status, 200);
  auto ok = HttpPost(port, "/v1/chat/completions", ChatBody("still fine?", 5, false).dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
  auto models = HttpGet(port, "/v1/models");
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "tiny");
}

TEST_F(Serve, OverloadIsAnswered429WithRetryAfter) {
  ServerProcess server(Args({"--max-waiting", "1", "--max-running", "1"}));
  ASSERT_TRUE(server.ok()) << server.Log();
  const int port = server.port();
  auto wait_for = [&](const char* metric, double value) {
    return testing::WaitUntil([&] { return Metrics(port)[metric] == value; }, std::chrono::milliseconds(2500),
                              std::chrono::milliseconds(5));
  };
  // One long request runs, a second waits in the only queue slot; a third is refused.
  auto running = std::async(std::launch::async, [&] {
    return HttpPost(port, "/v1/chat/completions", ChatBody("long one", 1500, false).dump());
  });
  ASSERT_TRUE(wait_for("tandem_requests_running", 1));
  auto queued = std::async(std::launch::async, [&] {
    return HttpPost(port, "/v1/chat/completions", ChatBody("queued", 4, false).dump());
  });
  ASSERT_TRUE(wait_for("tandem_requests_waiting", 1));
  const HttpResult refused = HttpPost(port, "/v1/chat/completions", ChatBody("third", 4, false).dump());
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.headers.count("Retry-After"), 1u);
  EXPECT_NE(refused.body.find("too many requests"), std::string::npos) << refused.body;
  EXPECT_EQ(running.get().status, 200);
  EXPECT_EQ(queued.get().status, 200);
}

TEST_F(Serve, CancellingHalfTheStreamsLeaksNothing) {
  ServerProcess server(Args());
  ASSERT_TRUE(server.ok()) << server.Log();
  std::vector<std::string> prompts;
  for (int i = 0; i < 32; ++i) prompts.push_back("cancel test " + std::to_string(i));
  std::vector<std::string> alone;
  for (int i = 1; i < 32; i += 2) {
    auto r = HttpPost(server.port(), "/v1/chat/completions", ChatBody(prompts[size_t(i)], 60, false).dump());
    alone.push_back(json::parse(r.body)["choices"][0]["message"]["content"].get<std::string>());
  }
  std::vector<std::future<StreamResult>> futures;
  for (int i = 0; i < 32; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      std::string body;
      int chunks = 0;
      HttpPostStream(server.port(), "/v1/chat/completions", ChatBody(prompts[size_t(i)], 60, true).dump(),
                     [&](const std::string& d) {
                       body += d;
                       return i % 2 == 1 || ++chunks < 4;  // even streams hang up after a few chunks
                     });
      return ParseStream(body);
    }));
  }
  for (int i = 0; i < 32; ++i) {
    const StreamResult r = futures[size_t(i)].get();
    if (i % 2 == 1) {
      EXPECT_TRUE(r.done) << i;
      EXPECT_EQ(r.text, alone[size_t(i / 2)]) << i;
    }
  }
  WaitIdle(server.port());
  auto m = Metrics(server.port());
  EXPECT_EQ(m["tandem_requests_running"] + m["tandem_requests_waiting"], 0);
  EXPECT_GE(m["tandem_requests_total{outcome=\"cancelled\"}"], 1);
  EXPECT_EQ(m["tandem_cache_pages{state=\"used\"}"], m["tandem_prefix_cache_pages"]);
  EXPECT_EQ(HttpGet(server.port(), "/health").status, 200);
}

TEST_F(Serve, SecondTurnReusesTheFirstTurnsPages) {
  ServerProcess server(Args());
  ServerProcess cold(Args({"--no-prefix-cache"}));
  ASSERT_TRUE(server.ok() && cold.ok()) << server.Log() << cold.Log();
  std::string history = "We are planning a trip to the mountains with the whole family this summer, ";
  for (int i = 0; i < 6; ++i) history += history;  // several pages
  json turn1 = ChatBody(history, 16, false);
  auto r1 = HttpPost(server.port(), "/v1/chat/completions", turn1.dump());
  ASSERT_EQ(r1.status, 200) << r1.body;
  const std::string answer = json::parse(r1.body)["choices"][0]["message"]["content"];
  json turn2 = turn1;
  turn2["messages"].push_back({{"role", "assistant"}, {"content", answer}});
  turn2["messages"].push_back({{"role", "user"}, {"content", "And what should we pack?"}});
  const double hits_before = Metrics(server.port())["tandem_prefix_cache_hit_tokens_total"];
  auto r2 = HttpPost(server.port(), "/v1/chat/completions", turn2.dump());
  auto r2_cold = HttpPost(cold.port(), "/v1/chat/completions", turn2.dump());
  ASSERT_EQ(r2.status, 200);
  const json j2 = json::parse(r2.body);
  EXPECT_GT(Metrics(server.port())["tandem_prefix_cache_hit_tokens_total"], hits_before + 256);
  EXPECT_GT(j2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 256);
  EXPECT_EQ(j2["choices"][0]["message"]["content"], json::parse(r2_cold.body)["choices"][0]["message"]["content"]);
}

TEST_F(Serve, SigtermDrainsInFlightStreamsThenExitsZero) {
  ServerProcess server(Args({"--shutdown-timeout", "60"}));
  ASSERT_TRUE(server.ok()) << server.Log();
  const int port = server.port();
  std::atomic<bool> first_chunk{false};
  auto stream = std::async(std::launch::async, [&] {
    std::string body;
    HttpPostStream(port, "/v1/chat/completions", ChatBody("a long answer please", 300, true).dump(),
                   [&](const std::string& d) {
                     body += d;
                     first_chunk = true;
                     return true;
                   });
    return ParseStream(body);
  });
  EXPECT_TRUE(testing::WaitUntil([&] { return first_chunk.load(); }, std::chrono::seconds(10),
                                 std::chrono::milliseconds(2)));
  server.SendSigterm();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // Draining: no new work. The in-flight stream may finish (and the server
  // exit) within these milliseconds; then a late request finds nobody — also
  // not served, which is what this checks.
  const int health = HttpGet(port, "/health").status;
  EXPECT_TRUE(health == 503 || health == 0) << health;
  const int late = HttpPost(port, "/v1/chat/completions", ChatBody("late", 4, false).dump()).status;
  EXPECT_TRUE(late == 503 || late == 0) << "a request after SIGTERM got HTTP " << late;
  const StreamResult r = stream.get();
  EXPECT_TRUE(r.done) << "the in-flight stream finished";
  EXPECT_FALSE(r.finish.empty());
  EXPECT_EQ(server.Terminate(), 0) << server.Log();
}

TEST_F(Serve, CompletionsAndToolsRequestsHaveOpenAIShapes) {
  ServerProcess server(Args());
  ASSERT_TRUE(server.ok()) << server.Log();
  const int port = server.port();
  auto plain = HttpPost(port, "/v1/completions",
                        R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0})");
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json p = json::parse(plain.body);
  EXPECT_EQ(p["object"], "text_completion");
  EXPECT_EQ(p["usage"]["completion_tokens"].get<int>(), 8);
  std::string streamed;
  EXPECT_EQ(HttpPostStream(port, "/v1/completions",
                           R"({"prompt":"Once upon a time","max_tokens":8,"temperature":0,"stream":true})",
                           [&](const std::string& d) { return streamed += d, true; }),
            200);
  std::string text;
  for (const auto& d : SseData(streamed)) {
    if (d != "[DONE]") text += json::parse(d)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, p["choices"][0]["text"].get<std::string>()) << "stream and non-stream agree";
  json tools = ChatBody("What is the weather in Paris?", 8, false);
  tools["tools"] = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather for a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  auto t = HttpPost(port, "/v1/chat/completions", tools.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  const json tj = json::parse(t.body);
  EXPECT_EQ(tj["object"], "chat.completion");
  EXPECT_GT(tj["usage"]["prompt_tokens"].get<int>(), 40) << "the tool schema was rendered into the prompt";
}

// logprobs over HTTP: chat (content entries with top_logprobs) and
// completions (the legacy arrays); streamed entries equal the non-streamed
// ones bit for bit (as JSON numbers), one per generated token, and the
// greedy token is always the first alternative.
TEST_F(Serve, LogprobsAreReportedPerTokenAndStreamLikeTheyCollect) {
  ServerProcess server(Args());
  ASSERT_TRUE(server.ok()) << server.Log();
  const int port = server.port();
  json body = ChatBody("Tell me a story about a cat", 12, false);
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  auto r = HttpPost(port, "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), size_t(j["usage"]["completion_tokens"].get<int>()));
  std::string spelled;
  for (const json& e : content) {
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]) << "temperature 0 picks the most likely token";
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]);
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
    for (const json& b : e["bytes"]) spelled += char(b.get<int>());
  }
  EXPECT_EQ(spelled, j["choices"][0]["message"]["content"].get<std::string>()) << "the tokens' bytes spell the answer";
  body["stream"] = true;
  std::string streamed;
  ASSERT_EQ(HttpPostStream(port, "/v1/chat/completions", body.dump(),
                           [&](const std::string& d) { return streamed += d, true; }),
            200);
  json streamed_entries = json::array();
  for (const auto& d : SseData(streamed)) {
    if (d == "[DONE]") continue;
    const json c = json::parse(d);
    if (c["choices"].empty() || c["choices"][0]["logprobs"].is_null()) continue;
    for (const json& e : c["choices"][0]["logprobs"]["content"]) streamed_entries.push_back(e);
  }
  EXPECT_EQ(streamed_entries, content) << "streamed logprobs equal the collected ones";
  // Completions: the legacy arrays, and the same numbers for the same tokens.
  auto c = HttpPost(port, "/v1/completions", R"({"prompt":"Once upon a time","max_tokens":6,"temperature":0,"logprobs":2})");
  ASSERT_EQ(c.status, 200) << c.body;
  const json lp = json::parse(c.body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 6u);
  ASSERT_EQ(lp["token_logprobs"].size(), 6u);
  ASSERT_EQ(lp["top_logprobs"].size(), 6u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
    EXPECT_EQ(lp["top_logprobs"][i][lp["tokens"][i].get<std::string>()], lp["token_logprobs"][i]);
  }
  // echo: the prompt's tokens first (the first without a logprob), then the
  // same answer with the same numbers; max_tokens 0 gives the prompt alone,
  // and streaming sends the prompt in the first chunk.
  auto e = HttpPost(port, "/v1/completions",
                    R"({"prompt":"Once upon a time","max_tokens":6,"temperature":0,"logprobs":2,"echo":true})");
  ASSERT_EQ(e.status, 200) << e.body;
  const json echoed = json::parse(e.body)["choices"][0];
  const json elp = echoed["logprobs"];
  const size_t n_prompt = json::parse(e.body)["usage"]["prompt_tokens"].get<size_t>();
  ASSERT_EQ(elp["tokens"].size(), n_prompt + 6);
  EXPECT_TRUE(elp["token_logprobs"][0].is_null());
  EXPECT_TRUE(elp["top_logprobs"][0].is_null());
  for (size_t i = 1; i < n_prompt; ++i) EXPECT_LE(elp["token_logprobs"][i].get<double>(), 0.0) << i;
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(elp["tokens"][n_prompt + i], lp["tokens"][i]);
    EXPECT_EQ(elp["token_logprobs"][n_prompt + i], lp["token_logprobs"][i]) << "the answer's numbers do not change";
  }
  const std::string answer = json::parse(c.body)["choices"][0]["text"];
  EXPECT_EQ(echoed["text"], "Once upon a time" + answer);
  auto only = HttpPost(port, "/v1/completions",
                       R"({"prompt":"Once upon a time","max_tokens":0,"logprobs":1,"echo":true})");
  ASSERT_EQ(only.status, 200) << only.body;
  const json o = json::parse(only.body);
  EXPECT_EQ(o["choices"][0]["text"], "Once upon a time");
  EXPECT_EQ(o["usage"]["completion_tokens"], 0);
  EXPECT_EQ(o["choices"][0]["logprobs"]["token_logprobs"].size(), n_prompt);
  EXPECT_EQ(o["choices"][0]["logprobs"]["token_logprobs"][n_prompt - 1], elp["token_logprobs"][n_prompt - 1]);
  std::string stream_text;
  ASSERT_EQ(HttpPostStream(port, "/v1/completions",
                           R"({"prompt":"Once upon a time","max_tokens":6,"temperature":0,"echo":true,"stream":true})",
                           [&](const std::string& d) { return stream_text += d, true; }),
            200);
  std::string joined;
  for (const auto& d : SseData(stream_text)) {
    if (d != "[DONE]") joined += json::parse(d)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(joined, "Once upon a time" + answer);
}

}  // namespace
}  // namespace tandem
