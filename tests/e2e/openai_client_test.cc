// The official `openai` npm client against a real `tandem serve`: chat
// logprobs, streamed logprobs and completions echo parse as the client
// expects (tests/e2e/openai_client/check.mjs). Needs node and npm, and the
// npm registry for `npm install openai`; without them it skips, saying so.
#include <gtest/gtest.h>

#include <filesystem>

#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

TEST(OpenAiClient, TheOfficialNpmClientParsesLogprobsStreamsAndEcho) {
  if (testing::RunShell("command -v node && command -v npm", 10).exit_code != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: node and npm are not installed, so the official openai client was not tried";
  }
  const std::string dir = testing::MakeTempDir();
  std::filesystem::copy_file(std::string(TANDEM_SOURCE_DIR) + "/tests/e2e/openai_client/check.mjs", dir + "/check.mjs");
  const auto install = testing::RunShell(
      "cd " + dir + " && npm init -y >/dev/null && npm install --no-audit --no-fund --loglevel=error openai", 300);
  if (install.exit_code != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: `npm install openai` failed (no registry?), so the client was not tried:\n"
                 << install.output;
  }
  testing::ServerProcess server({"serve", "-m", testing::TinyModelPath(), "--model-id", "tiny"});
  ASSERT_TRUE(server.ok()) << server.Log();
  const auto run = testing::RunShell(
      "cd " + dir + " && node check.mjs http://127.0.0.1:" + std::to_string(server.port()) + "/v1 tiny", 120);
  EXPECT_EQ(run.exit_code, 0) << run.output << server.Log();
  EXPECT_NE(run.output.find("parsed"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace tandem
