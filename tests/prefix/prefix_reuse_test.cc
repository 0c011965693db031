// A prefix hit reuses cached pages (every registered buffer, index-K
// included) and yields bitwise the same logits as recomputing the prompt.
#include <gtest/gtest.h>

#include <cstring>

#include "cache/page_copy.h"
#include "model/forward.h"
#include "prefix/prefix_index.h"
#include "support/test_models.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

using testing::MakePresetModel;
using testing::PseudoRandomTokens;
using testing::RunSequence;

// Runs `tokens` through the engine-like path: reuse the longest cached prefix
// (whole pages, then the rows of a partial page copied into a fresh one),
// allocate the rest (evicting cached pages if needed), compute, then index the
// pages (the last partial one too) and drop the sequence's own references.
std::vector<float> RunWithCache(const Model& model, ForwardPass& fwd, PagePool& pool,
                                PrefixIndex& index, const std::vector<int32_t>& tokens,
                                int64_t* hit_tokens) {
  PrefixIndex::Match hit = index.Lookup(tokens, int64_t(tokens.size()) - 1, /*partial=*/true);
  *hit_tokens = hit.tokens + hit.partial_tokens;
  const int64_t need = int64_t(tokens.size() + kPageTokens - 1) / kPageTokens - int64_t(hit.pages.size());
  if (pool.free_pages() < need) index.Evict(need - pool.free_pages());
  auto fresh = pool.Allocate(need);
  EXPECT_TRUE(fresh.ok()) << fresh.status().ToString();
  std::vector<int32_t> pages = hit.pages;
  pages.insert(pages.end(), fresh->begin(), fresh->end());
  if (hit.partial_page >= 0) {
    EXPECT_TRUE(CopyPageRows(pool, hit.partial_page, (*fresh)[0], hit.partial_tokens).ok());
    pool.Release({&hit.partial_page, 1});
  }
  std::vector<float> logits;
  SequenceChunk chunk{std::span<const int32_t>(tokens).subspan(size_t(*hit_tokens)), *hit_tokens, pages, true};
  EXPECT_TRUE(fwd.Run({&chunk, 1}, pool, &logits).ok());
  index.Insert(tokens, pages, /*with_partial=*/true);
  pool.Release(pages);
  return logits;
}

void CheckReuse(const std::string& preset, const AttentionOptions& attention) {
  auto m = MakePresetModel(preset, TensorType::kF32);
  const Model& model = *m->model;
  ThreadPool threads(2);
  const CacheSpec spec = *MakeCacheSpec(model.config(), attention);
  PagePool pool(spec.registry, int(model.config().n_layers), 10);
  const auto baseline = pool.accounting();
  ForwardPass fwd(model, spec, threads);
  const size_t vocab = size_t(model.config().vocab_size);
  {
    PrefixIndex index(pool);
    // Turn 1, then turn 2 re-sending turn 1 plus more, then an unrelated prompt
    // that forces evictions, then turn 2 again.
    auto turn1 = PseudoRandomTokens(200, model.config().vocab_size, 1);
    auto turn2 = turn1;
    const auto more = PseudoRandomTokens(90, model.config().vocab_size, 2);
    turn2.insert(turn2.end(), more.begin(), more.end());
    const auto other = PseudoRandomTokens(400, model.config().vocab_size, 3);
    int64_t hit = 0;
    RunWithCache(model, fwd, pool, index, turn1, &hit);
    EXPECT_EQ(hit, 0);
    const auto warm = RunWithCache(model, fwd, pool, index, turn2, &hit);
    EXPECT_EQ(hit, 200) << "turn 1 to the token: three full pages and 8 rows of a partial one";
    const auto cold = RunSequence(model, threads, turn2, 0, attention);
    ASSERT_EQ(warm.size(), cold.size() - size_t(hit) * vocab);
    EXPECT_EQ(0, std::memcmp(warm.data(), cold.data() + size_t(hit) * vocab, warm.size() * 4));
    RunWithCache(model, fwd, pool, index, other, &hit);
    EXPECT_EQ(hit, 0);
    EXPECT_GT(index.stats().evicted_pages, 0) << "10 pages cannot hold everything";
    const auto again = RunWithCache(model, fwd, pool, index, turn2, &hit);
    EXPECT_EQ(0, std::memcmp(again.data(), cold.data() + size_t(hit) * vocab, again.size() * 4))
        << "after evictions, hit " << hit;
    EXPECT_TRUE(pool.CheckAccounting().ok());
  }
  EXPECT_EQ(pool.accounting(), baseline) << "the index released every page";
}

// On the tiny llama model and on dsa-tiny (deepseek32: kv_latent + index_k).
class PrefixReuse : public ::testing::TestWithParam<std::string> {};

TEST_P(PrefixReuse, DenseHitsGiveIdenticalLogits) { CheckReuse(GetParam(), {}); }

TEST_P(PrefixReuse, SparseHitsReuseIndexKAndGiveIdenticalLogits) {
  AttentionOptions a;
  a.kind = AttentionKind::kSparse;
  a.top_k = 32;
  for (auto dtype : {CacheDType::kFp8E4M3Scaled, CacheDType::kBF16}) {
    a.index_k_dtype = dtype;
    CheckReuse(GetParam(), a);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, PrefixReuse, testing::kTestModels, testing::ModelInstanceName);

}  // namespace
}  // namespace tandem
