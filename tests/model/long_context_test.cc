// A 16k-token prompt on the real tiny model (trained on 512) under sparse
// attention, and its first 8k dense: dense prefill grows with the square of
// the prompt (16k took 100 of this test's 117 s here, 8k a quarter of that),
// and past 8k it runs the same kernels on longer rows. Speed is reported by
// `tandem generate` and `tandem bench indexer`, not here.
#include <gtest/gtest.h>

#include "runtime/generator.h"
#include "support/paths.h"

namespace tandem {
namespace {

TEST(LongContext, Stories260KSixteenThousandTokensSparseAndEightThousandDense) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok());
  const Model& m = **model;
  std::vector<int32_t> prompt = {1};
  const auto sentence = m.tokenizer().Encode(
      "Once upon a time, there was a little girl named Lily. She loved to play in the park. ", false, false);
  while (prompt.size() + sentence.size() < 16300) prompt.insert(prompt.end(), sentence.begin(), sentence.end());
  ASSERT_GT(prompt.size(), 16000u);
  ThreadPool threads(2);
  GenerateOptions opt;
  opt.max_tokens = 8;
  opt.ignore_eos = true;
  std::vector<std::vector<int32_t>> outputs;
  for (int variant = 0; variant < 3; ++variant) {
    AttentionOptions a;
    if (variant > 0) {
      a.kind = AttentionKind::kSparse;
      a.top_k = 256;
      a.index_k_dtype = variant == 1 ? CacheDType::kFp8E4M3Scaled : CacheDType::kBF16;
    }
    auto spec = MakeCacheSpec(m.config(), a);
    ASSERT_TRUE(spec.ok());
    Generator gen(m, *spec, threads, 16384);
    const std::vector<int32_t> input = variant == 0 ? std::vector<int32_t>(prompt.begin(), prompt.begin() + 8192) : prompt;
    auto r = gen.Run(input, opt, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tokens.size(), 8u);
    std::cout << "[ long context ] variant " << variant << ": prefill " << r->prefill_seconds
              << " s, decode " << r->decode_seconds / 8 * 1e3 << " ms/token\n";
    outputs.push_back(r->tokens);
  }
  EXPECT_EQ(outputs[1].size(), outputs[2].size());
}

}  // namespace
}  // namespace tandem
