// The official `openai` npm client against a real `tandem serve` (and a
// router in front of it): chat
// logprobs, streamed logprobs and completions echo parse as the client
// expects (tests/e2e/openai_client/check.mjs), and so does what agents ask
// for (agents.mjs). Needs node and npm, and the
// npm registry for `npm install openai`; without them it skips, saying so.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

// A folder with the client installed and `script` copied in; empty (with
// *why set) when node, npm or the registry is missing.
std::string InstallClient(const std::string& script, std::string* why) {
  if (testing::RunShell("command -v node && command -v npm", 10).exit_code != 0) {
    *why = "node and npm are not installed, so the official openai client was not tried";
    return "";
  }
  const std::string dir = testing::MakeTempDir();
  std::filesystem::copy_file(std::string(TANDEM_SOURCE_DIR) + "/tests/e2e/openai_client/" + script, dir + "/" + script);
  const auto install = testing::RunShell(
      "cd " + dir + " && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error openai", 300);
  if (install.exit_code != 0) {
    *why = "`npm install openai` failed (no registry?), so the client was not tried:\n" + install.output;
    return "";
  }
  return dir;
}

TEST(OpenAiClient, TheOfficialNpmClientParsesLogprobsStreamsAndEcho) {
  std::string why;
  const std::string dir = InstallClient("check.mjs", &why);
  if (dir.empty()) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  testing::ServerProcess server({"serve", "-m", testing::TinyModelPath(), "--model-id", "tiny"});
  ASSERT_TRUE(server.ok()) << server.Log();
  const auto run = testing::RunShell(
      "cd " + dir + " && node check.mjs http://127.0.0.1:" + std::to_string(server.port()) + "/v1 tiny", 120);
  EXPECT_EQ(run.exit_code, 0) << run.output << server.Log();
  EXPECT_NE(run.output.find("parsed"), std::string::npos) << run.output;
  // The same through the router (its relay is its own HTTP client and server).
  testing::ServerProcess router({"router", "--decode", "127.0.0.1:" + std::to_string(server.port())});
  ASSERT_TRUE(router.ok()) << router.Log();
  const auto routed = testing::RunShell(
      "cd " + dir + " && node check.mjs http://127.0.0.1:" + std::to_string(router.port()) + "/v1 tiny", 120);
  EXPECT_EQ(routed.exit_code, 0) << routed.output << router.Log();
  EXPECT_NE(routed.output.find("parsed"), std::string::npos) << routed.output;
}

// Structured outputs (100 random schemas, every answer checked again by
// python3-jsonschema), a forced tool call streamed as deltas, n = 4, and
// logit_bias and penalties, through the official client
// (tests/e2e/openai_client/agents.mjs).
TEST(OpenAiClient, TheOfficialNpmClientGetsWhatAgentsAskFor) {
  std::string why;
  const std::string dir = InstallClient("agents.mjs", &why);
  if (dir.empty()) GTEST_SKIP() << "SKIPPED LOUDLY: " << why;
  testing::ServerProcess server({"serve", "-m", testing::TinyModelPath(), "--model-id", "tiny"});
  ASSERT_TRUE(server.ok()) << server.Log();
  const auto run = testing::RunShell("cd " + dir + " && node agents.mjs http://127.0.0.1:" +
                                         std::to_string(server.port()) + "/v1 tiny " + dir + "/answers.jsonl",
                                     300);
  ASSERT_EQ(run.exit_code, 0) << run.output << server.Log();
  EXPECT_NE(run.output.find("100 structured answers"), std::string::npos) << run.output;
  if (testing::RunShell("python3 -c 'import jsonschema'", 30).exit_code != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: python3-jsonschema is not installed: the answers were parsed by the client "
                    "but not validated against their schemas";
  }
  const auto valid = testing::RunShell("python3 " + std::string(TANDEM_SOURCE_DIR) +
                                           "/tests/runtime/validate_json.py < " + dir + "/answers.jsonl | grep -c '^ok$'",
                                       60);
  EXPECT_EQ(valid.output, "100\n");
}

}  // namespace
}  // namespace tandem
