#include "transfer/handshake.h"

#include <gtest/gtest.h>

#include "cache/layout.h"
#include "model/cache_spec.h"
#include "model/model.h"
#include "support/test_models.h"

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
  const Hello p{"prefill", Fingerprint(CacheDType::kBF16), "tiny:1", 1, 2, {}, {}}, d{"decode", Fingerprint(CacheDType::kBF16), "tiny:1", 2, 0, {}, {}};
  EXPECT_TRUE(CheckHello(p, d).ok());
  EXPECT_TRUE(CheckHello(d, p).ok());
}

TEST(Handshake, Fp8AgainstBf16IndexKIsRefusedWithAClearMessage) {
  const Hello p{"prefill", Fingerprint(CacheDType::kFp8E4M3Scaled), "tiny:1", 1, 2, {}, {}};
  const Hello d{"decode", Fingerprint(CacheDType::kBF16), "tiny:1", 2, 0, {}, {}};
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

// Invariant 9: engines of different numerics (another build's kernels) agree
// on layouts and weights, so they connected and served answers that equal no
// colocated run exactly. Refused by default, naming both; allowed by name.
TEST(Handshake, OtherNumericsAreRefusedNamingBothUnlessAllowed) {
  const std::string layout = Fingerprint(CacheDType::kBF16);
  Hello p{"prefill", layout, "tiny:1", 1, 2, {}, {}}, d{"decode", layout, "tiny:1", 2, 0, {}, {}};
  p.numerics = "numerics%20version=1;kernel%20variant=debug-ulp";
  d.numerics = "numerics%20version=1;kernel%20variant=";
  for (const Status& st : {CheckHello(d, p), CheckHello(p, d)}) {
    ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(st.message().find("numerics mismatch"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("debug-ulp"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("they differ in kernel variant"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("--allow-mixed-numerics"), std::string::npos) << st.message();
  }
  EXPECT_TRUE(CheckHello(d, p, /*allow_mixed_numerics=*/true).ok());
  EXPECT_TRUE(CheckHello(p, d, /*allow_mixed_numerics=*/true).ok());
  // Allowing mixed numerics allows nothing else.
  Hello other_weights = p;
  other_weights.weights_identity = "tiny:2";
  EXPECT_FALSE(CheckHello(d, other_weights, true).ok());
  d.numerics = p.numerics;
  EXPECT_TRUE(CheckHello(d, p).ok());
}

TEST(Handshake, TwoEnginesOfTheSameRoleAreRefused) {
  const Hello a{"decode", "x", "w", 1, 0, {}, {}}, b{"decode", "x", "w", 2, 0, {}, {}};
  EXPECT_NE(CheckHello(a, b).message().find("both ends"), std::string::npos);
}

// Regression: a prefill engine on the f16 file and a decode server on the
// q8_0 file of one model had the same layout, connected, and served a cache
// computed with one set of weights decoded with another.
TEST(Handshake, SameShapesOtherWeightsAreRefused) {
  const Hello p{"prefill", Fingerprint(CacheDType::kBF16), "tiny:111", 1, 2, {}, {}};
  const Hello d{"decode", Fingerprint(CacheDType::kBF16), "tiny:222", 2, 0, {}, {}};
  for (const Status& st : {CheckHello(d, p), CheckHello(p, d)}) {
    ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(st.message().find("model weights mismatch"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("tiny:111"), std::string::npos) << st.message();
  }
}

// Issue 26, "hostile files": the weights identity hashed tensors only, so an
// engine on a file whose rope.freq_base was edited connected to one on the
// original and decoded its caches: wrong tokens, no error. Both sides refuse
// now, naming the key; a file that was only renamed still connects.
TEST(Handshake, AnEditedRopeFreqBaseIsRefusedNamingTheKey) {
  auto tiny = [](const std::function<void(GgufWriter&)>& tweak) {
    return WeightsIdentity(
        *testing::MakePresetModel("tiny", TensorType::kF32, 7, "llama", tweak)->model);
  };
  const std::string layout = Fingerprint(CacheDType::kBF16);
  const Hello d{"decode", layout, tiny({}), 2, 0, {}, {}};
  const Hello p{"prefill",
                layout,
                tiny([](GgufWriter& w) { w.SetFloat32("llama.rope.freq_base", 500000.0f); }),
                1,
                2,
                {},
                {}};
  auto wire = Hello::Decode(p.Encode());
  ASSERT_TRUE(wire.ok()) << wire.status().ToString();
  for (const Status& st : {CheckHello(d, p), CheckHello(p, d), CheckHello(d, *wire)}) {
    ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("model weights mismatch"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("their models differ in metadata llama.rope.freq_base;"),
              std::string::npos)
        << st.message();
  }
  const Hello renamed{
      "prefill", layout, tiny([](GgufWriter& w) { w.SetString("general.name", "another name"); }),
      1,         2,      {},
      {}};
  EXPECT_TRUE(CheckHello(d, renamed).ok());
}

TEST(Handshake, InstanceIdsAreRandomAndNeverZero) {
  const uint64_t a = NewInstanceId(), b = NewInstanceId();
  EXPECT_NE(a, 0u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace tandem::transfer
