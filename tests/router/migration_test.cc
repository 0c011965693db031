// A stream the router moves is the uninterrupted stream, bit for bit: two
// serve front ends (in this process) behind cutting proxies, a router in
// front of those; the proxies break the first stream off after its k-th SSE
// event, for every k in turn, and what the client reads is compared with the
// same request asked of a server directly. Greedy, sampled with a seed, a
// forced tool call, a JSON-schema answer, n = 2, logprobs and echo.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>

#include "router/router.h"
#include "runtime/engine.h"
#include "server/http_client.h"
#include "server/http_core.h"
#include "server/http_server.h"
#include "support/http_client.h"
#include "support/test_models.h"
#include "support/wait.h"

namespace tandem {
namespace {

using json = nlohmann::json;

// Relays to one server; the first stream it is told to cut ends after its
// cut_after-th SSE event (its connection closed, as when a server dies).
class CuttingProxy {
 public:
  CuttingProxy(int target, std::atomic<int>* cut_after, std::atomic<int>* cuts_left, std::atomic<int>* cut)
      : target_(target), cut_after_(cut_after), cuts_left_(cuts_left), cut_(cut), core_(HttpLimits{}, AccessPolicy{}) {
    for (const char* path : {"/v1/chat/completions", "/v1/completions"}) {
      core_.Route("POST", path, [this](HttpRequest& req, std::shared_ptr<HttpReply> reply) { Relay(req, reply); });
    }
    core_.Route("GET", "/health", [this](HttpRequest& req, std::shared_ptr<HttpReply> reply) { Relay(req, reply); });
    EXPECT_TRUE(core_.Start("127.0.0.1", 0).ok());
  }
  ~CuttingProxy() {
    core_.Stop();
    client_.Stop();
  }
  int port() const { return core_.port(); }

 private:
  void Relay(HttpRequest& req, const std::shared_ptr<HttpReply>& reply) {
    struct State {
      int cut_at = 0, events = 0, status = 0;
      bool streaming = false;
      std::string body;
    };
    auto st = std::make_shared<State>();
    if (req.method == "POST") {
      int left = cuts_left_->load();
      while (left > 0 && !cuts_left_->compare_exchange_weak(left, left - 1)) {
      }
      if (left > 0) st->cut_at = cut_after_->load();
    }
    HttpClientRequest up;
    up.host = "127.0.0.1";
    up.port = target_;
    up.method = req.method;
    up.target = req.target;
    up.headers.emplace_back("Content-Type", "application/json");
    up.body = req.body;
    HttpClientEvents ev;
    ev.on_head = [st, reply](int status, const HttpHeaders&) {
      st->status = status;
      if (status == 200 && st->cut_at >= 0 && reply) {
        st->streaming = true;
        reply->StartStream(200, "text/event-stream");
      }
    };
    std::atomic<int>* cut = cut_;
    ev.on_data = [st, reply, cut](std::string data) {
      if (!st->streaming) return st->body += data, true;
      if (st->cut_at > 0) {
        for (size_t at = 0; (at = data.find("\n\n", at)) != std::string::npos; at += 2) {
          if (++st->events == st->cut_at) {
            reply->Write(data.substr(0, at + 2));
            ++*cut;
            reply->Abort();
            return false;
          }
        }
      }
      return reply->Write(std::move(data));
    };
    ev.on_done = [st, reply](const std::string& error) {
      if (st->streaming) return error.empty() ? reply->End() : reply->Abort();
      reply->Send(st->status == 0 ? 502 : st->status, "application/json", st->body);
    };
    auto call = client_.Start(std::move(up), std::move(ev));
    reply->OnHangUp([call] { call->Cancel(); });
  }

  const int target_;
  std::atomic<int>* const cut_after_;
  std::atomic<int>* const cuts_left_;
  std::atomic<int>* const cut_;
  HttpClient client_;
  HttpCore core_;
};

std::string Normalized(std::string s) {
  static const std::regex id(R"("id":"(chatcmpl|cmpl)-[0-9]+")"), created(R"("created":[0-9]+)"),
      call(R"(call_[0-9]+_)"), cached(R"("cached_tokens":[0-9]+)");
  s = std::regex_replace(s, id, R"("id":"X")");
  s = std::regex_replace(s, created, R"("created":0)");
  s = std::regex_replace(s, call, "call_X_");
  return std::regex_replace(s, cached, R"("cached_tokens":0)");  // what each server's cache held
}

// Where two streams part, with some context (empty: they are equal).
std::string Difference(const std::string& got, const std::string& want) {
  if (got == want) return {};
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i < 200 ? 0 : i - 200;
  return "they part at byte " + std::to_string(i) + " of " + std::to_string(want.size()) + ":\n--- got\n" +
         got.substr(from, 500) + "\n--- want\n" + want.substr(from, 500);
}

// n > 1: the choices' chunks interleave as their tokens happen to come, in
// any run; each choice's own chunks, in order, then the rest, are the answer.
std::string Demuxed(const std::string& stream) {
  std::map<int, std::string> choices;
  std::string rest;
  for (size_t at = 0, end; (end = stream.find("\n\n", at)) != std::string::npos; at = end + 2) {
    const std::string event = stream.substr(at, end + 2 - at);
    const json j = json::parse(event.substr(std::min(event.size(), size_t(6))), nullptr, false);
    if (j.is_object() && j.contains("choices") && j["choices"].size() == 1) {
      choices[j["choices"][0].value("index", -1)] += event;
    } else {
      rest += event;
    }
  }
  std::string out;
  for (const auto& [i, events] : choices) out += "choice " + std::to_string(i) + ":\n" + events;
  return out + "rest:\n" + rest;
}

std::string Stream(int port, const std::string& path, const json& body) {
  std::string out;
  const int status = testing::HttpPostStream(port, path, body.dump(), [&](const std::string& d) {
    out += d;
    return true;
  });
  EXPECT_EQ(status, 200) << out;
  return out;
}

class Migration : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::MakePresetModel("tiny", TensorType::kF32);
    for (int i = 0; i < 2; ++i) {
      EngineOptions opt;
      opt.cache_tokens = 64 * 100;
      opt.threads = 1;
      auto engine = Engine::Create(*model_->model, opt);
      ASSERT_TRUE(engine.ok()) << engine.status().ToString();
      engines_.push_back(std::move(engine).value());
      ServerOptions so;
      so.port = 0;
      so.model_id = "tiny";
      servers_.push_back(std::make_unique<HttpServer>(*engines_.back(), *model_->model, so));
      ASSERT_TRUE(servers_.back()->Start().ok());
      proxies_.push_back(std::make_unique<CuttingProxy>(servers_.back()->port(), &cut_after_, &cuts_left_, &cut_));
    }
    RouterOptions ro;
    ro.port = 0;
    ro.health_interval = std::chrono::milliseconds(20);
    ro.max_moves = 16;
    for (const auto& p : proxies_) ro.backends.push_back("127.0.0.1:" + std::to_string(p->port()));
    router_ = std::make_unique<Router>(ro);
    ASSERT_TRUE(router_->Start().ok());
  }
  void TearDown() override {
    router_.reset();
    proxies_.clear();
    for (auto& s : servers_) s->Stop();
  }

  // The request through the router with its first stream cut after each of
  // its SSE events in turn: every client stream equals the direct one.
  // Returns the direct stream.
  std::string ExpectEveryCutHeals(const std::string& path, json body) {
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    const bool several = body.value("n", 1) > 1;
    auto read = [&](int port) {
      const std::string s = Normalized(Stream(port, path, body));
      return several ? Demuxed(s) : s;
    };
    const std::string direct = read(servers_[0]->port());
    EXPECT_NE(direct.find("data: [DONE]"), std::string::npos) << direct;
    if (::testing::Test::HasFailure()) return direct;
    int cuts = 0;
    for (int k = 1; k < 400; ++k) {
      cut_after_ = k;
      cuts_left_ = 1;
      const int before = cut_.load();
      const std::string routed = read(router_->port());
      const bool was_cut = cut_.load() > before;
      EXPECT_EQ(Difference(routed, direct), "") << "cut after SSE event " << k << " of " << body.dump();
      if (::testing::Test::HasFailure()) return direct;
      if (!was_cut) break;  // past the stream's last event: every point was cut
      ++cuts;
    }
    EXPECT_GE(cuts, 8) << "the stream was too short to test: " << direct;
    return direct;
  }

  std::unique_ptr<testing::InMemoryModel> model_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::vector<std::unique_ptr<HttpServer>> servers_;
  std::atomic<int> cut_after_{0}, cuts_left_{0}, cut_{0};
  std::vector<std::unique_ptr<CuttingProxy>> proxies_;
  std::unique_ptr<Router> router_;
};

json Chat(const std::string& user) {
  return {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", user}}}}, {"max_tokens", 12}};
}

TEST_F(Migration, GreedyAndSeededStreamsHealAtEveryPoint) {
  json greedy = Chat("Count to ten");
  greedy["temperature"] = 0;
  ExpectEveryCutHeals("/v1/chat/completions", greedy);
  json sampled = {{"model", "tiny"}, {"prompt", "Once upon a time"}, {"max_tokens", 12},
                  {"temperature", 0.9}, {"seed", 77}, {"frequency_penalty", 0.5}};
  ExpectEveryCutHeals("/v1/completions", sampled);
}

TEST_F(Migration, SampledWithoutASeedHealsWithTheRoutersSeed) {
  // The router pins a seed: the moved stream goes on with the one it began with.
  json body = Chat("Tell me something");
  body["temperature"] = 1.0;
  body["stream"] = true;
  cut_after_ = 6;
  cuts_left_ = 1;
  const std::string routed = Stream(router_->port(), "/v1/chat/completions", body);
  EXPECT_EQ(cut_.load(), 1);
  EXPECT_NE(routed.find("data: [DONE]"), std::string::npos) << routed;
  EXPECT_EQ(routed.find("\"error\""), std::string::npos) << routed;
  EXPECT_EQ(routed.find(": tandem"), std::string::npos) << "the trace reached the client";
}

TEST_F(Migration, ToolCallsAndJsonSchemaAnswersHealAtEveryPoint) {
  json tool = Chat("What is the weather in Paris?");
  tool["temperature"] = 0.7;
  tool["seed"] = 3;
  tool["max_tokens"] = 90;
  tool["tools"] = {{{"type", "function"},
                    {"function", {{"name", "get_weather"},
                                  {"parameters", {{"type", "object"},
                                                  {"properties", {{"city", {{"type", "string"}, {"maxLength", 8}}}}},
                                                  {"required", {"city"}}}}}}}};
  tool["tool_choice"] = "required";
  const std::string called = ExpectEveryCutHeals("/v1/chat/completions", tool);
  EXPECT_NE(called.find("\"finish_reason\":\"tool_calls\""), std::string::npos) << called;
  EXPECT_NE(called.find("get_weather"), std::string::npos) << called;
  json schema = Chat("Describe a thing");
  schema["temperature"] = 0.9;
  schema["seed"] = 11;
  schema["max_tokens"] = 40;
  schema["response_format"] = {
      {"type", "json_schema"},
      {"json_schema", {{"name", "thing"}, {"schema", {{"type", "object"},
                                                      {"properties", {{"n", {{"type", "integer"}}},
                                                                      {"tag", {{"enum", {"a", "bb", 7}}}}}},
                                                      {"required", {"n", "tag"}},
                                                      {"additionalProperties", false}}}}}};
  const std::string answered = ExpectEveryCutHeals("/v1/chat/completions", schema);
  EXPECT_NE(answered.find("\"finish_reason\":\"stop\""), std::string::npos) << answered;
}

TEST_F(Migration, SeveralChoicesAndLogprobsHealAtEveryPoint) {
  json two = Chat("Two answers, please");
  two["n"] = 2;
  two["temperature"] = 0.8;
  two["seed"] = 21;
  two["max_tokens"] = 8;
  ExpectEveryCutHeals("/v1/chat/completions", two);
  json logprobs = Chat("With logprobs");
  logprobs["logprobs"] = true;
  logprobs["top_logprobs"] = 2;
  logprobs["temperature"] = 0;
  EXPECT_NE(ExpectEveryCutHeals("/v1/chat/completions", logprobs).find("\"top_logprobs\":[{"), std::string::npos);
  json echo = {{"model", "tiny"}, {"prompt", "Echo me"}, {"max_tokens", 10}, {"echo", true},
               {"logprobs", 1}, {"temperature", 0.5}, {"seed", 4}};
  EXPECT_NE(ExpectEveryCutHeals("/v1/completions", echo).find("\"text_offset\":[0"), std::string::npos);
}

}  // namespace
}  // namespace tandem
