// Structured outputs as real servers serve them: the same request gives the
// same tokens alone, in a batch of 32, and through a disaggregated pair (the
// prefill engine samples the first token under the same grammar, budget,
// logit_bias and penalties that the decode server applies after it).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <future>
#include <set>

#include "support/disagg_client.h"
#include "support/http_client.h"
#include "support/server_process.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

using json = nlohmann::json;

json Body(int i) {
  const json schema = json::parse(R"({"type": "object", "properties": {
      "title": {"type": "string", "maxLength": 24},
      "tags": {"type": "array", "items": {"enum": ["red", "green", 7, null]}, "maxItems": 4},
      "size": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
      "parts": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}}},
    "required": ["title", "tags", "size", "parts"], "additionalProperties": false})");
  return {{"messages", {{{"role", "user"}, {"content", "Describe item " + std::to_string(i)}}}},
          {"max_tokens", 60 + i % 30},
          {"temperature", 0.9},
          {"seed", 100 + i},
          {"return_token_ids", true},
          {"logit_bias", {{"300", 2.5}, {"41", -3}}},
          {"frequency_penalty", 0.4},
          {"presence_penalty", 0.2},
          {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "item"}, {"strict", true}, {"schema", schema}}}}}};
}

struct Answer {
  int status = 0;
  std::vector<json> choices;  // token_ids and content of each
  std::string raw;
};

Answer Ask(int port, const json& body) {
  const auto r = testing::HttpPost(port, "/v1/chat/completions", body.dump());
  Answer a;
  a.status = r.status;
  a.raw = r.body;
  const json j = json::parse(r.body, nullptr, false);
  if (r.status == 200 && j.is_object()) {
    for (const json& c : j["choices"]) {
      a.choices.push_back({{"tokens", c.value("token_ids", json::array())},
                           {"content", c["message"]["content"]},
                           {"tool_calls", c["message"].value("tool_calls", json())}});
    }
  }
  return a;
}

TEST(StructuredServing, TheSameRequestIsTheSameBitsAloneBatchedAndDisaggregated) {
  const std::string& model = testing::TinyModelPath();
  ASSERT_FALSE(model.empty());
  auto colocated = testing::StartServe(model, "bf16");
  auto prefill = testing::StartPrefill(model, "bf16");
  ASSERT_TRUE(colocated->ok() && prefill->ok()) << colocated->Log() << prefill->Log();
  auto decode = testing::StartServe(model, "bf16", testing::Loopback(prefill->port()));
  ASSERT_TRUE(decode->ok()) << decode->Log();

  const Answer alone = Ask(colocated->port(), Body(0));
  ASSERT_EQ(alone.status, 200) << alone.raw;
  ASSERT_EQ(alone.choices.size(), 1u);
  const json parsed = json::parse(alone.choices[0]["content"].get<std::string>(), nullptr, false);
  ASSERT_TRUE(parsed.is_object()) << alone.raw;
  EXPECT_TRUE(parsed.contains("title") && parsed.contains("tags") && parsed.contains("size") && parsed.contains("parts"));

  auto batch = [&](int port) {
    std::vector<std::future<Answer>> futures;
    for (int i = 0; i < 32; ++i) futures.push_back(std::async(std::launch::async, [port, i] { return Ask(port, Body(i)); }));
    std::vector<Answer> out;
    for (auto& f : futures) out.push_back(f.get());
    return out;
  };
  const std::vector<Answer> batched = batch(colocated->port());
  for (int i = 0; i < 32; ++i) {
    ASSERT_EQ(batched[size_t(i)].status, 200) << batched[size_t(i)].raw;
    EXPECT_FALSE(json::parse(batched[size_t(i)].choices[0]["content"].get<std::string>(), nullptr, false).is_discarded())
        << batched[size_t(i)].raw;
  }
  EXPECT_EQ(batched[0].choices, alone.choices) << "batched with 31 others, request 0 changed";

  const Answer disagg_alone = Ask(decode->port(), Body(0));
  ASSERT_EQ(disagg_alone.status, 200) << disagg_alone.raw << decode->Log();
  EXPECT_EQ(disagg_alone.choices, alone.choices) << "disaggregated, request 0 changed";
  const std::vector<Answer> disagg_batched = batch(decode->port());
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(disagg_batched[size_t(i)].choices, batched[size_t(i)].choices) << "request " << i;
  }

  // n choices and a forced tool call take the same path.
  json choices = Body(3);
  choices["n"] = 3;
  const Answer three = Ask(colocated->port(), choices);
  ASSERT_EQ(three.status, 200) << three.raw;
  ASSERT_EQ(three.choices.size(), 3u);
  EXPECT_EQ(three.choices[0], batched[3].choices[0]) << "choice 0 is the n = 1 answer";
  EXPECT_EQ(Ask(decode->port(), choices).choices, three.choices);
  json tool = Body(5);
  tool.erase("response_format");
  tool["tools"] = json::parse(R"([{"type": "function", "function": {"name": "lookup", "parameters":
      {"type": "object", "properties": {"q": {"type": "string", "maxLength": 10}, "k": {"type": "integer"}},
       "required": ["q", "k"]}}}])");
  tool["tool_choice"] = "required";
  tool["max_tokens"] = 120;
  const Answer call = Ask(colocated->port(), tool);
  ASSERT_EQ(call.status, 200) << call.raw;
  ASSERT_TRUE(call.choices[0]["tool_calls"].is_array()) << call.raw;
  EXPECT_EQ(call.choices[0]["tool_calls"][0]["function"]["name"], "lookup");
  const json args = json::parse(call.choices[0]["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["q"].is_string() && args["k"].is_number_integer()) << args;
  EXPECT_EQ(Ask(decode->port(), tool).choices, call.choices);

  EXPECT_EQ(decode->Terminate(), 0) << decode->Log();
  EXPECT_EQ(prefill->Terminate(), 0) << prefill->Log();
}

// n choices share the prompt's cache pages: the other choices find the first
// one's full prompt pages in the prefix cache instead of computing them.
TEST(StructuredServing, ChoicesShareThePromptsPages) {
  const std::string& model = testing::TinyModelPath();
  ASSERT_FALSE(model.empty());
  auto server = testing::StartServe(model, "bf16");
  ASSERT_TRUE(server->ok()) << server->Log();
  std::string words;
  for (int i = 0; i < 300; ++i) words += " w" + std::to_string(i * 7919 % 1000);
  const json body = {{"prompt", "A long prompt:" + words}, {"max_tokens", 8}, {"temperature", 1.0}, {"seed", 4}, {"n", 4}};
  auto hits = [&] {
    return testing::ParseMetrics(testing::HttpGet(server->port(), "/metrics").body)["tandem_prefix_cache_hit_tokens_total"];
  };
  const double before = hits();
  const auto r = testing::HttpPost(server->port(), "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 4u);
  const int64_t prompt = j["usage"]["prompt_tokens"].get<int64_t>();
  ASSERT_GE(prompt, 3 * 64);
  EXPECT_EQ(j["usage"]["completion_tokens"], 4 * 8);
  EXPECT_GE(hits() - before, double(3 * (prompt / 64) * 64)) << "three choices reuse every full prompt page";
  std::set<std::string> texts;
  for (const json& c : j["choices"]) texts.insert(c["text"].get<std::string>());
  EXPECT_GE(texts.size(), 2u) << "the choices draw from different seeds";
}

}  // namespace
}  // namespace tandem
