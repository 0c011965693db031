// node::Membership: the signed discovery records that say who belongs to a
// cluster (security code: a record etcd holds is not trusted until its proof
// checks), and the filters a router or decode server applies to a view.
#include "node/membership.h"

#include <gtest/gtest.h>

namespace tandem::node {
namespace {

transfer::ClusterKey Key(const std::string& secret) { return *transfer::ClusterKey::FromSecret(secret); }

discovery::EngineRecord Record(const std::string& address) {
  discovery::EngineRecord r;
  r.role = "prefill";
  r.instance = 42;
  r.address = address;
  r.transport = "tcp";
  r.layout = "layout-a";
  r.weights = "weights-a";
  r.numerics = "numerics-a";
  return r;
}

TEST(Membership, ASignedRecordChecksAndAnyEditedFieldIsRefused) {
  const Membership members(Key("0123456789abcdef-cluster-one"), false, "test");
  discovery::EngineRecord r = Record("10.0.0.5:7000");
  members.Sign(&r);
  ASSERT_EQ(r.proof.size(), 64u);
  EXPECT_TRUE(members.Check(r).ok());
  using Edit = std::function<void(discovery::EngineRecord&)>;
  const std::vector<std::pair<std::string, Edit>> edits = {
      {"address", [](auto& e) { e.address = "10.0.0.6:7000"; }},
      {"role", [](auto& e) { e.role = "decode"; }},
      {"instance", [](auto& e) { e.instance = 43; }},
      {"transport", [](auto& e) { e.transport = "ucx"; }},
      {"layout", [](auto& e) { e.layout = "layout-b"; }},
      {"weights", [](auto& e) { e.weights = "weights-b"; }},
      {"kv topic", [](auto& e) { e.kv_topic = "tandem-x"; }},
      {"load", [](auto& e) { e.load = 9; }},
  };
  for (const auto& [what, edit] : edits) {
    discovery::EngineRecord forged = r;
    edit(forged);
    const Status st = members.Check(forged);
    EXPECT_EQ(st.code(), StatusCode::kPermissionDenied) << what << ": " << st.ToString();
  }
}

TEST(Membership, AnotherClustersKeyAMissingOrMalformedProofAreRefused) {
  const Membership ours(Key("0123456789abcdef-cluster-one"), false, "test");
  const Membership theirs(Key("0123456789abcdef-cluster-two"), false, "test");
  discovery::EngineRecord r = Record("10.0.0.5:7000");
  theirs.Sign(&r);
  EXPECT_TRUE(theirs.Check(r).ok());
  EXPECT_EQ(ours.Check(r).code(), StatusCode::kPermissionDenied);
  for (const std::string proof : {std::string(), std::string(63, 'a'), std::string(65, 'a'), std::string(64, 'A'),
                                  std::string(64, 'g'), std::string(64, '0')}) {
    discovery::EngineRecord bad = Record("10.0.0.5:7000");
    bad.proof = proof;
    EXPECT_EQ(ours.Check(bad).code(), StatusCode::kPermissionDenied) << "'" << proof << "'";
  }
  // Signer and Checker are the same rules, for DiscoveryOptions.
  discovery::EngineRecord via = Record("10.0.0.7:7000");
  ours.Signer()(&via);
  EXPECT_TRUE(ours.Checker()(via).ok());
  EXPECT_FALSE(theirs.Checker()(via).ok());
}

TEST(Membership, WithoutAKeyOnlyAnInsecureReaderTakesLoopbackRecords) {
  const Membership insecure(transfer::ClusterKey{}, true, "test");
  const Membership strict(transfer::ClusterKey{}, false, "test");
  discovery::EngineRecord local = Record("127.0.0.1:7000");
  insecure.Sign(&local);
  EXPECT_TRUE(local.proof.empty());  // nothing to sign with
  EXPECT_FALSE(insecure.signed_records());
  EXPECT_TRUE(insecure.Check(local).ok());
  EXPECT_EQ(insecure.Check(Record("10.0.0.5:7000")).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(strict.Check(local).code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(insecure.Check(Record("not an address")).ok());
}

TEST(Membership, KvKeysComeFromTheClusterKeyAndNoneWithout) {
  auto none = Membership(transfer::ClusterKey{}, true, "test").KvKeys();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->enabled());
  auto one = Membership(Key("0123456789abcdef-cluster-one"), false, "test").KvKeys();
  auto again = Membership(Key("0123456789abcdef-cluster-one"), false, "test").KvKeys();
  auto two = Membership(Key("0123456789abcdef-cluster-two"), false, "test").KvKeys();
  ASSERT_TRUE(one.ok() && again.ok() && two.ok());
  EXPECT_TRUE(one->enabled());
  EXPECT_EQ(one->secret_z85, again->secret_z85);
  EXPECT_EQ(one->public_z85, again->public_z85);
  EXPECT_NE(one->secret_z85, two->secret_z85);
}

TEST(Membership, AViewIsFilteredByWhatItComputesAndByWhoPublishes) {
  std::vector<discovery::EngineRecord> view = {Record("10.0.0.1:7000"), Record("10.0.0.2:7000"),
                                               Record("10.0.0.3:7000"), Record("10.0.0.4:7000"),
                                               Record("10.0.0.1:7000")};
  view[1].layout = "layout-b";
  view[2].weights = "weights-b";
  view[3].transport = "ucx";
  discovery::EngineRecord want;
  want.layout = "layout-a";
  want.weights = "weights-a";
  want.transport = "tcp";
  EXPECT_EQ(MatchingAddresses(view, want), std::vector<std::string>{"10.0.0.1:7000"});  // once, though listed twice
  EXPECT_EQ(MatchingAddresses(view, {}).size(), 4u);  // an empty want matches anything
  view[0].kv_topic = "tandem-1";
  view[0].kv_events = "tcp://10.0.0.1:7100";
  view[0].kv_snapshot = "tcp://10.0.0.1:7101";
  view[1].kv_topic = "tandem-2";
  view[1].kv_events = "tcp://10.0.0.2:7100";  // no snapshot endpoint: not a source
  view[2] = view[0];
  view[2].address = "10.0.0.3:7000";
  const auto sources = KvSources(view, {"10.0.0.1:7000", "10.0.0.2:7000"});
  // 10.0.0.2 has no snapshot endpoint, 10.0.0.3 was not asked for, the
  // second record of 10.0.0.1 publishes nothing.
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].name, "10.0.0.1:7000");
  EXPECT_EQ(sources[0].topic, "tandem-1");
  EXPECT_EQ(sources[0].snapshot, "tcp://10.0.0.1:7101");
}

}  // namespace
}  // namespace tandem::node
