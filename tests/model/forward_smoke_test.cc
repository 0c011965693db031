#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "model/forward.h"
#include "support/paths.h"

namespace tandem {
namespace {

TEST(ForwardSmoke, GreedyFromBos) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Model& m = **model;
  ThreadPool threads(2);
  PagePool pool(m.cache_registry(), int(m.config().n_layers), 8);
  auto pages = pool.Allocate(5);
  ASSERT_TRUE(pages.ok());
  ForwardPass fwd(m, threads);
  auto tokens_meta = m.gguf().GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens_meta.ok());
  std::vector<int32_t> seq = {1};
  std::string text;
  for (int step = 0; step < 256; ++step) {
    std::vector<float> logits;
    SequenceChunk c{std::span<const int32_t>(seq).subspan(seq.size() - 1), int64_t(seq.size() - 1), *pages, false};
    ASSERT_TRUE(fwd.Run({&c, 1}, pool, &logits).ok());
    int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    seq.push_back(best);
    text += (*tokens_meta)[size_t(best)];
  }
  std::cout << text << "\n";
}

}  // namespace
}  // namespace tandem
