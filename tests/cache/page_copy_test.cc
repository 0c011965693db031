// A distinct byte pattern in every (buffer, layer, token) survives page copies
// and moves byte for byte; a buffer added to the registry in this test is
// covered with no other code change.
#include "cache/page_copy.h"

#include <gtest/gtest.h>

#include "model/cache_spec.h"

namespace tandem {
namespace {

uint8_t Pattern(CacheBufferId b, int l, int64_t token, int64_t byte) {
  return uint8_t((b * 131 + l * 31 + token * 7 + byte * 13 + 1) & 0xff);
}

// Writes each token slot's whole row (data and any per-token scale) in page p.
void Fill(PagePool& pool, int32_t page, int64_t first_token) {
  ForEachSegment(pool.layout(), [&](CacheBufferId b, int l, int64_t bytes) {
    uint8_t* seg = pool.Segment(b, l, page);
    const int64_t per_token = pool.layout().spec(b).BytesPerToken();
    for (int64_t i = 0; i < bytes; ++i) seg[i] = Pattern(b, l, first_token + i / per_token, i % per_token);
  });
}

::testing::AssertionResult Holds(PagePool& pool, int32_t page, int64_t first_token) {
  bool ok = true;
  std::string where;
  ForEachSegment(pool.layout(), [&](CacheBufferId b, int l, int64_t bytes) {
    const uint8_t* seg = pool.Segment(b, l, page);
    const int64_t per_token = pool.layout().spec(b).BytesPerToken();
    for (int64_t i = 0; i < bytes && ok; ++i) {
      if (seg[i] != Pattern(b, l, first_token + i / per_token, i % per_token)) {
        ok = false;
        where = pool.layout().spec(b).name + " layer " + std::to_string(l) + " byte " + std::to_string(i);
      }
    }
  });
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "page " << page << " differs at " << where;
}

void RoundTrip(const CacheBufferRegistry& registry) {
  const int layers = 3;
  PagePool a(registry, layers, 6), b(registry, layers, 6);
  auto src = *a.Allocate(3);
  for (size_t i = 0; i < src.size(); ++i) Fill(a, src[i], int64_t(i) * kPageTokens);
  // Copy a -> b, then move within b (copy and free the old page), then back to a.
  auto mid = *b.Allocate(3);
  for (size_t i = 0; i < src.size(); ++i) ASSERT_TRUE(CopyPage(a, src[i], b, mid[i]).ok());
  auto moved = *b.Allocate(3);
  for (size_t i = 0; i < src.size(); ++i) ASSERT_TRUE(CopyPage(b, mid[i], b, moved[i]).ok());
  b.Release(mid);
  auto back = *a.Allocate(3);
  for (size_t i = 0; i < src.size(); ++i) ASSERT_TRUE(CopyPage(b, moved[i], a, back[i]).ok());
  for (size_t i = 0; i < src.size(); ++i) {
    EXPECT_TRUE(Holds(b, moved[i], int64_t(i) * kPageTokens));
    EXPECT_TRUE(Holds(a, back[i], int64_t(i) * kPageTokens));
  }
  a.Release(src);
  a.Release(back);
  b.Release(moved);
  EXPECT_EQ(a.free_pages(), a.total_pages());
  EXPECT_EQ(b.free_pages(), b.total_pages());
}

TEST(PageCopy, EveryBufferLayerAndTokenSurvives) {
  ModelConfig c;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  for (auto dtype : {CacheDType::kFp8E4M3Scaled, CacheDType::kBF16}) {
    AttentionOptions a;
    a.kind = AttentionKind::kSparse;
    a.index_k_dtype = dtype;
    auto spec = MakeCacheSpec(c, a);
    ASSERT_TRUE(spec.ok());
    RoundTrip(spec->registry);
  }
}

TEST(PageCopy, AFourthBufferIsCoveredWithNoOtherChange) {
  ModelConfig c;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  AttentionOptions a;
  a.kind = AttentionKind::kSparse;
  auto spec = MakeCacheSpec(c, a);
  ASSERT_TRUE(spec.ok());
  CacheBufferRegistry registry = spec->registry;
  ASSERT_TRUE(registry.Register({"future_buffer", CacheDType::kBF16, 40}).ok());
  ASSERT_EQ(registry.size(), 4);
  RoundTrip(registry);
}

TEST(PageCopy, MismatchedLayoutsAreRefused) {
  CacheBufferRegistry r1, r2;
  ASSERT_TRUE(r1.Register({"k", CacheDType::kF32, 8}).ok());
  ASSERT_TRUE(r2.Register({"k", CacheDType::kBF16, 8}).ok());
  PagePool a(r1, 2, 2), b(r2, 2, 2);
  Status st = CopyPage(a, 0, b, 0);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("k:bf16"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace tandem
