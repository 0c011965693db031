// Published traces as workloads: the shipped Mooncake and multi-turn traces
// load, their prefix sharing becomes shared prompt text, and malformed lines
// are refused naming the line.
#include "loadgen/trace.h"

#include <gtest/gtest.h>

#include <fstream>

#include "support/paths.h"
#include "support/process.h"

namespace tandem {
namespace {

std::string Shipped(const std::string& name) { return std::string(TANDEM_SOURCE_DIR) + "/tests/loadgen/traces/" + name; }

TEST(Trace, TheShippedMooncakeTraceLoadsWithItsSharedPrefixes) {
  TraceOptions o;
  o.length_scale = 0.05;
  auto t = LoadTrace(Shipped("mooncake_1000.jsonl"), o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->format, "mooncake");
  EXPECT_EQ(t->requests, 1000);
  EXPECT_EQ(t->sessions.size(), 1000u);
  EXPECT_GT(t->shared_blocks, 10);
  for (size_t i = 1; i < t->sessions.size(); ++i) {
    EXPECT_LE(t->sessions[i - 1].turns[0].at_s, t->sessions[i].turns[0].at_s);  // in arrival order
  }
  // Requests that share their first hash id share their first block's text.
  std::map<std::string, int> firsts;
  for (const TraceSession& s : t->sessions) ++firsts[s.turns[0].text.substr(0, s.turns[0].text.find('\n'))];
  int shared = 0;
  for (const auto& [text, n] : firsts) shared += n > 1 ? n : 0;
  EXPECT_GT(shared, 100);
  // The limit and the scale.
  o.limit = 10;
  o.length_scale = 0.1;
  auto few = LoadTrace(Shipped("mooncake_1000.jsonl"), o);
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(few->requests, 10);
}

TEST(Trace, TheShippedConversationsKeepTheirTurns) {
  auto t = LoadTrace(Shipped("conversations.jsonl"), {});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->format, "conversations");
  EXPECT_EQ(t->sessions.size(), 24u);
  EXPECT_GT(t->requests, 24 * 3 - 1);
  for (const TraceSession& s : t->sessions) {
    ASSERT_GE(s.turns.size(), 3u);
    EXPECT_GE(s.turns[0].at_s, 0);
    EXPECT_EQ(s.turns[1].at_s, -1);  // after the previous answer
    EXPECT_FALSE(s.turns[1].text.empty());
  }
}

TEST(Trace, MalformedLinesAreRefusedNamingTheLine) {
  const std::string dir = testing::MakeTempDir();
  auto refused = [&](const std::string& body, const std::string& says) {
    const std::string path = dir + "/t.jsonl";
    std::ofstream(path) << body;
    auto t = LoadTrace(path, {});
    EXPECT_FALSE(t.ok()) << body;
    EXPECT_NE(t.status().message().find(says), std::string::npos) << t.status().message();
  };
  refused("{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 5}\nnot json\n", "line 2: not a JSON object");
  refused("{\"timestamp\": 1, \"output_length\": 5}\n", "line 1: no \"input_length\"");
  refused("{\"timestamp\": 1, \"input_length\": -3, \"output_length\": 5}\n", "\"input_length\" must be");
  refused("{\"timestamp\": 1, \"input_length\": 99999999, \"output_length\": 5}\n", "\"input_length\" must be");
  refused("{\"timestamp\": 1, \"input_length\": 2000, \"output_length\": 5, \"hash_ids\": [1, 2]}\n",
          "more than its 2 blocks");
  refused("{\"timestamp\": 1, \"input_length\": 20, \"output_length\": 5, \"hash_ids\": [\"x\"]}\n", "not an integer");
  refused("{\"session_id\": \"a\", \"turns\": []}\n", "\"turns\" must be");
  refused("{\"session_id\": \"a\", \"turns\": [{\"delay\": 3}]}\n", "string \"text\"");
  refused("\n\n", "has no requests");
  refused("{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 5}\n" + std::string((16 << 20) + 2, ' ') +
              "\n",
          "line 2: longer than 16 MiB");
  EXPECT_EQ(LoadTrace(dir + "/missing.jsonl", {}).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tandem
