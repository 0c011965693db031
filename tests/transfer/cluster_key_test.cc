// The engines' cluster key (transfer/cluster_key.h): proofs verify only under
// the same key, label and parts; short or missing keys are refused.
#include "transfer/cluster_key.h"

#include <gtest/gtest.h>

#include <fstream>

#include "support/process.h"

namespace tandem::transfer {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

TEST(ClusterKey, AProofVerifiesOnlyUnderTheSameKeyLabelAndParts) {
  auto a = ClusterKey::FromSecret("a shared secret of the cluster");
  auto b = ClusterKey::FromSecret("another secret, same length!!!");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<uint8_t> n1 = NewNonce(), n2 = NewNonce();
  ASSERT_EQ(n1.size(), ClusterKey::kNonceBytes);
  EXPECT_NE(n1, n2);
  const std::vector<uint8_t> proof = a->Prove("decode hello", {n1});
  ASSERT_EQ(proof.size(), 32u);
  EXPECT_TRUE(a->Verify("decode hello", {n1}, proof));
  EXPECT_FALSE(b->Verify("decode hello", {n1}, proof)) << "another key";
  EXPECT_FALSE(a->Verify("prefill hello", {n1}, proof)) << "another label";
  EXPECT_FALSE(a->Verify("decode hello", {n2}, proof)) << "another nonce";
  EXPECT_FALSE(a->Verify("decode hello", {n1, n2}, proof)) << "more parts";
  std::vector<uint8_t> flipped = proof;
  flipped[31] ^= 1;
  EXPECT_FALSE(a->Verify("decode hello", {n1}, flipped));
  EXPECT_FALSE(a->Verify("decode hello", {n1}, std::span<const uint8_t>(proof).first(16))) << "a prefix of a proof";
  // Parts are length-prefixed: moving a byte across a boundary changes the proof.
  EXPECT_NE(a->Prove("x", {Bytes("ab"), Bytes("c")}), a->Prove("x", {Bytes("a"), Bytes("bc")}));
  ClusterKey none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Prove("decode hello", {n1}).empty());
  EXPECT_FALSE(none.Verify("decode hello", {n1}, proof)) << "no key verifies nothing";
}

TEST(ClusterKey, KeysAreReadWholeTrimmedAndRefusedWhenShortOrMissing) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/good") << "  0123456789abcdef0123\n";
  std::ofstream(dir + "/short") << "0123456789\n";
  std::ofstream(dir + "/empty") << "\n";
  auto good = ClusterKey::Load(dir + "/good");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  auto same = ClusterKey::FromSecret("0123456789abcdef0123");
  const std::vector<uint8_t> n = NewNonce();
  EXPECT_TRUE(same->Verify("l", {n}, good->Prove("l", {n}))) << "surrounding whitespace is not part of the key";
  auto short_key = ClusterKey::Load(dir + "/short");
  EXPECT_FALSE(short_key.ok());
  EXPECT_NE(short_key.status().message().find("at least 16 bytes"), std::string::npos) << short_key.status().message();
  EXPECT_FALSE(ClusterKey::Load(dir + "/empty").ok());
  auto missing = ClusterKey::Load(dir + "/none");
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot read --cluster-key-file"), std::string::npos);
  ASSERT_TRUE(WriteRandomClusterKey(dir + "/random").ok());
  EXPECT_TRUE(ClusterKey::Load(dir + "/random").ok());
}

}  // namespace
}  // namespace tandem::transfer
