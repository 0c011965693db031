#include "transfer/handshake.h"

#include <gtest/gtest.h>

#include "cache/layout.h"
#include "model/cache_spec.h"

namespace tandem::transfer {
namespace {

std::string Fingerprint(CacheDType index_k) {
  ModelConfig c;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  AttentionOptions a;
  a.kind = AttentionKind::kSparse;
  a.index_k_dtype = index_k;
  return CacheLayout(MakeCacheSpec(c, a)->registry, 5, 0).Fingerprint();
}

TEST(Handshake, MatchingLayoutsConnect) {
  const Hello p{"prefill", Fingerprint(CacheDType::kBF16), 1}, d{"decode", Fingerprint(CacheDType::kBF16), 2};
  EXPECT_TRUE(CheckHello(p, d).ok());
  EXPECT_TRUE(CheckHello(d, p).ok());
}

TEST(Handshake, Fp8AgainstBf16IndexKIsRefusedWithAClearMessage) {
  const Hello p{"prefill", Fingerprint(CacheDType::kFp8E4M3Scaled), 1};
  const Hello d{"decode", Fingerprint(CacheDType::kBF16), 2};
  const Status st = CheckHello(d, p);
  ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("cache layout mismatch"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("index_k:bf16:256 where the prefill engine has index_k:fp8_e4m3+f32scale:132"),
            std::string::npos)
      << st.message();
  // The wire round trip keeps it.
  auto wire = Hello::Decode(p.Encode());
  ASSERT_TRUE(wire.ok());
  EXPECT_FALSE(CheckHello(d, *wire).ok());
}

TEST(Handshake, TwoEnginesOfTheSameRoleAreRefused) {
  const Hello a{"decode", "x", 1}, b{"decode", "x", 2};
  EXPECT_NE(CheckHello(a, b).message().find("both ends"), std::string::npos);
}

}  // namespace
}  // namespace tandem::transfer
