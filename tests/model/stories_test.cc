// The real tiny model: greedy generation from BOS reproduces the documented
// 256-token output exactly.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "runtime/generator.h"
#include "support/paths.h"

namespace tandem {
namespace {

TEST(Stories260K, GreedyFromBosMatchesDocumentedOutput) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  std::ifstream f(testing::SharedModelsDir() + "/stories260K.greedy.txt");
  std::stringstream want;
  want << f.rdbuf();
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    Generator gen(m, *MakeCacheSpec(m.config()), pool, 512);
    GenerateOptions opt;
    opt.max_tokens = 256;
    opt.ignore_eos = true;
    const int32_t bos = m.tokenizer().bos_id();
    auto result = gen.Run({&bos, 1}, opt, nullptr);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    ASSERT_EQ(result->tokens.size(), 256u);
    std::string text = m.tokenizer().Decode(result->tokens);
    std::string expected = want.str();
    while (!expected.empty() && expected.back() == '\n') expected.pop_back();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    EXPECT_EQ(text, expected) << "threads " << threads;
  }
}

TEST(Stories260K, SeededSamplingIsReproducible) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok());
  const Model& m = **model;
  ThreadPool pool(2);
  GenerateOptions opt;
  opt.max_tokens = 64;
  opt.sampling.temperature = 0.9f;
  opt.sampling.top_k = 40;
  opt.sampling.top_p = 0.95f;
  opt.sampling.seed = 42;
  const auto prompt = m.tokenizer().Encode("Once upon a time", true, false);
  const CacheSpec spec = *MakeCacheSpec(m.config());
  Generator a(m, spec, pool, 256), b(m, spec, pool, 256);
  auto r1 = a.Run(prompt, opt, nullptr);
  auto r2 = b.Run(prompt, opt, nullptr);
  ASSERT_TRUE(r1.ok() && r2.ok());
  EXPECT_EQ(r1->tokens, r2->tokens);
  opt.sampling.seed = 43;
  auto r3 = a.Run(prompt, opt, nullptr);
  ASSERT_TRUE(r3.ok());
  EXPECT_NE(r1->tokens, r3->tokens) << "a different seed should change a 64-token sample";
}

TEST(Stories260K, StopStringCutsTheText) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok());
  ThreadPool pool(1);
  Generator gen(**model, *MakeCacheSpec((*model)->config()), pool, 512);
  GenerateOptions opt;
  opt.max_tokens = 100;
  opt.stop_strings = {"Lily"};
  std::string streamed;
  const int32_t bos = (*model)->tokenizer().bos_id();
  auto r = gen.Run({&bos, 1}, opt, [&](std::string_view s) {
    streamed += s;
    return true;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finish, FinishReason::kStop);
  EXPECT_EQ(streamed, r->text);
  EXPECT_EQ(r->text, " Once upon a time, there was a little girl named ");
}

}  // namespace
}  // namespace tandem
