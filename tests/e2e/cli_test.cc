// The `tandem` command as a user runs it: real processes, checked output.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/server_process.h"
#include "support/paths.h"
#include "support/process.h"

namespace tandem {
namespace {

using testing::MakeTempDir;
using testing::RunTandem;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir(); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(Cli, MkmodelThenGenerateIsDeterministic) {
  const std::string model = dir_ + "/tiny.gguf";
  auto mk = RunTandem("mkmodel --preset tiny --type q8_0 --out " + model);
  ASSERT_EQ(mk.exit_code, 0) << mk.output;
  auto mk2 = RunTandem("mkmodel --preset tiny --type q8_0 --out " + dir_ + "/tiny2.gguf");
  ASSERT_EQ(mk2.exit_code, 0);
  std::ifstream a(model, std::ios::binary), b(dir_ + "/tiny2.gguf", std::ios::binary);
  std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_GT(sa.size(), 100000u);
  EXPECT_EQ(sa, sb) << "mkmodel must be byte-for-byte deterministic";
  auto g1 = RunTandem("generate -m " + model + " -p 'Hello there' -n 12 --temp 0.7 --seed 5");
  auto g2 = RunTandem("generate -m " + model + " -p 'Hello there' -n 12 --temp 0.7 --seed 5 --threads 1 --isa scalar");
  ASSERT_EQ(g1.exit_code, 0) << g1.output;
  ASSERT_EQ(g2.exit_code, 0) << g2.output;
  // The text (first line) is identical across thread counts and ISAs.
  EXPECT_EQ(g1.output.substr(0, g1.output.find('\n')), g2.output.substr(0, g2.output.find('\n')));
  EXPECT_NE(g1.output.find("generated 12 tokens"), std::string::npos) << g1.output;
}

TEST_F(Cli, GenerateWithoutModelUsesTheEmbeddedDefault) {
  auto g = RunTandem("generate -p 'Hi' -n 4", 300, "TANDEM_HOME=" + dir_);
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/models/default-small-f32-v3.gguf"));
  EXPECT_NE(g.output.find("tandem-small"), std::string::npos) << g.output;
}

TEST_F(Cli, BenchStructuredReportsEveryFormatAndCompleteAnswers) {
  const std::string model = dir_ + "/tiny.gguf";
  ASSERT_EQ(RunTandem("mkmodel --preset tiny --out " + model).exit_code, 0);
  auto r = RunTandem("bench structured -m " + model + " --requests 4 --concurrency 2 --max-tokens 64", 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"text ", "json_object ", "json_schema "}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
  }
  EXPECT_EQ(r.output.find("failed"), std::string::npos) << r.output;
  size_t complete = 0;
  for (size_t at = r.output.find("4/4"); at != std::string::npos; at = r.output.find("4/4", at + 1)) ++complete;
  EXPECT_EQ(complete, 2u) << "every constrained answer parses, in both constrained formats:\n" << r.output;
}

// The grammar budget's measurement (issue 26): three rows, their ratios, and
// the worst case ending with the per-token work error.
TEST_F(Cli, BenchStructuredIsolationReportsOrdinaryLatencyBesideTheWorstCase) {
  const std::string model = dir_ + "/tiny.gguf";
  ASSERT_EQ(RunTandem("mkmodel --preset tiny --out " + model).exit_code, 0);
  auto r = RunTandem("bench structured --isolation -m " + model +
                         " --rounds 1 --ordinary 2 --beside 4 --max-tokens 64 --grammar-time-share 0.1",
                     300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* row : {"\nnothing ", "\nfree text ", "\nworst-case grammar "}) {
    EXPECT_NE(r.output.find(row), std::string::npos) << row << "\n" << r.output;
  }
  EXPECT_NE(r.output.find("worst-case choices failed: 4 of 4, with: the structured-output grammar exceeded"),
            std::string::npos)
      << r.output;
}

// bench model --llama-bench runs the named binary on the same file after
// each round (here a stand-in script that records its arguments and prints
// llama-bench's CSV) and reports medians and ratios; a binary that fails
// ends the benchmark with its error.
TEST_F(Cli, BenchModelRunsLlamaBenchOnTheSameFileAndReportsRatios) {
  const std::string model = dir_ + "/tiny.gguf";
  ASSERT_EQ(RunTandem("mkmodel --preset tiny --type q8_0 --out " + model).exit_code, 0);
  const std::string fake = dir_ + "/llama-bench", calls = dir_ + "/calls.txt";
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\necho \"$@\" >> " << calls << "\n"
      << "echo 'build_commit,model_filename,n_prompt,n_gen,avg_ns,stddev_ns,avg_ts,stddev_ts'\n"
      << "case \"$*\" in *'-n 0'*) ts=250.5 ;; *) ts=50.25 ;; esac\n"
      << "echo \"\\\"abc\\\",\\\"a, b.gguf\\\",64,0,1,0,\\\"$ts\\\",0\"\n";
  }
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  auto r = RunTandem("bench model -m " + model + " --context 64 --attention dense --decode-tokens 4 -t 1 --repeat 3 "
                     "--llama-bench " + fake, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("int8"), std::string::npos) << r.output;
  const size_t row = r.output.find("llama.cpp  file");
  ASSERT_NE(row, std::string::npos) << r.output;
  const std::string line = r.output.substr(row, r.output.find('\n', row) - row);
  EXPECT_NE(line.find("250.5"), std::string::npos) << line;
  EXPECT_NE(line.find("50.25"), std::string::npos) << line;
  EXPECT_NE(line.find("tandem/llama.cpp: prefill"), std::string::npos) << line;
  std::ifstream in(calls);
  std::string all((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(all.find("-m " + model + " -t 1 -r 1 -o csv -p 64 -n 0"), std::string::npos) << all;
  EXPECT_NE(all.find("-p 0 -n 4 -d 64"), std::string::npos) << all;
  size_t runs = 0;
  for (size_t at = all.find('\n'); at != std::string::npos; at = all.find('\n', at + 1)) ++runs;
  EXPECT_EQ(runs, 6u) << "three rounds of two runs\n" << all;
  {
    std::ofstream f(fake);
    f << "#!/bin/sh\nexit 2\n";
  }
  auto bad = RunTandem("bench model -m " + model + " --context 64 --attention dense --decode-tokens 4 -t 1 "
                       "--llama-bench " + fake, 300);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_NE(bad.output.find("llama-bench"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("exit status 2"), std::string::npos) << bad.output;
}

TEST_F(Cli, BadInputsGiveClearErrors) {
  auto missing = RunTandem("generate -m " + dir_ + "/nope.gguf -p x");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("nope.gguf"), std::string::npos) << missing.output;
  {
    std::ofstream f(dir_ + "/bad.gguf", std::ios::binary);
    f << "GGUF\x03";  // truncated after the magic
  }
  auto bad = RunTandem("generate -m " + dir_ + "/bad.gguf -p x");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("header version"), std::string::npos) << bad.output;
  auto preset = RunTandem("mkmodel --preset huge --out " + dir_ + "/x.gguf");
  EXPECT_EQ(preset.exit_code, 1);
  EXPECT_NE(preset.output.find("unknown model preset 'huge'"), std::string::npos) << preset.output;
  auto isa = RunTandem("generate -m " + dir_ + "/bad.gguf --isa neon -p x");
  EXPECT_NE(isa.exit_code, 0);
  EXPECT_NE(isa.output.find("--isa"), std::string::npos) << isa.output;
  // A command that does not exist is an error, --help or not (it printed the parent's help, exit 0).
  auto nosuch = RunTandem("nosuch --help");
  EXPECT_EQ(nosuch.exit_code, 2) << nosuch.output;
  EXPECT_NE(nosuch.output.find("tandem: unknown command 'nosuch' (the commands: "), std::string::npos) << nosuch.output;
  auto bench = RunTandem("bench nosuch");
  EXPECT_EQ(bench.exit_code, 2) << bench.output;
  EXPECT_NE(bench.output.find("tandem bench: unknown command 'nosuch'"), std::string::npos) << bench.output;
  EXPECT_NE(bench.output.find("bystander"), std::string::npos) << bench.output;
  EXPECT_EQ(RunTandem("bench bystander --help").exit_code, 0);
}

// Server logs: one line per event with time, role and level (the filter
// itself: tests/common/log_test.cc); a bad --log-level is refused before
// anything starts.
TEST_F(Cli, ServerLogLinesCarryRoleAndLevelAndTheLevelFilters) {
  auto bad = RunTandem("prefill --log-level chatty --port 0");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--log-level must be debug, info, warn, error or off, not 'chatty'"), std::string::npos)
      << bad.output;
  // A router whose only backend is unreachable starts, logs its address at info, and stops on SIGTERM.
  testing::ServerProcess info({"router", "--decode", "127.0.0.1:1"}, 30, "http://127.0.0.1:");
  ASSERT_TRUE(info.ok()) << info.Log();
  EXPECT_EQ(info.Terminate(), 0);
  EXPECT_NE(info.Log().find(" router info  tandem router: http://127.0.0.1:"), std::string::npos) << info.Log();
}

// Every fault works where it is asked for or is refused there, never dropped.
TEST_F(Cli, FaultFlagsAreRefusedWhereTheyCannotWork) {
  struct Case {
    const char* args;
    int exit_code;
    const char* says;
  };
  for (const Case& c : {Case{"serve --debug-unsafe-early-commit --port 0", 2, "they need --disagg"},
                        Case{"serve --debug-ungated-index-k --port 0", 1, "--debug-ungated-index-k is a fault of the L2 tier"},
                        Case{"prefill --debug-unsafe-early-commit --insecure-no-cluster-key --port 0", 1, "needs sparse attention"},
                        Case{"serve --debug-ungated-index-k --host-cache-size 64M --port 0", 1,
                             "is not in this cache's registry (is attention sparse?)"}}) {
    auto r = RunTandem(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST_F(Cli, Stories260KFromTheCommandLine) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto g = RunTandem("generate -m " + path + " -p 'Once upon a time' -n 20");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.output.rfind(", there was a little", 0), 0u) << g.output;
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(CliSparse, GenerateFlagsAndBeyondContextWarning) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto dense = testing::RunTandem("generate -m " + path + " -p 'Once upon a time' -n 16 --attention dense");
  auto sparse = testing::RunTandem("generate -m " + path +
                                   " -p 'Once upon a time' -n 16 --attention sparse --topk 4096 --index-k-dtype bf16");
  ASSERT_EQ(dense.exit_code, 0) << dense.output;
  ASSERT_EQ(sparse.exit_code, 0) << sparse.output;
  // top-k above the context: identical text.
  EXPECT_EQ(dense.output.substr(0, dense.output.find('\n')), sparse.output.substr(0, sparse.output.find('\n')));
  EXPECT_NE(sparse.output.find("sparse attention"), std::string::npos);
  auto far = testing::RunTandem("generate -m " + path + " -p 'Hi' -n 2 --ctx-size 4096");
  EXPECT_EQ(far.exit_code, 0);
  EXPECT_NE(far.output.find("warning: --ctx-size 4096 exceeds the model's trained context 2048"),
            std::string::npos) << far.output;
  auto bad = testing::RunTandem("generate -m " + path + " -p 'Hi' --attention fuzzy");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("attention must be dense or sparse"), std::string::npos) << bad.output;
  auto bad_dtype = testing::RunTandem("generate -m " + path + " -p 'Hi' --attention sparse --index-k-dtype fp4");
  EXPECT_EQ(bad_dtype.exit_code, 1);
  EXPECT_NE(bad_dtype.output.find("fp8 or bf16"), std::string::npos) << bad_dtype.output;
}

}  // namespace
}  // namespace tandem
