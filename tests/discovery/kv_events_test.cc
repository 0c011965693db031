// KV events: vLLM's schema on the wire, a publisher fed by the prefix
// index's hook, subscribers that join late (snapshot) and subscribers that
// lack the cluster's key (refused).
#include "discovery/kv_events.h"

#include <gtest/gtest.h>
#include <msgpack.hpp>

#include "common/chain_key.h"
#include "discovery/kv_events_wire.h"
#include "support/wait.h"

namespace tandem::discovery {
namespace {

using std::chrono::seconds;
using testing::WaitUntil;

std::vector<int32_t> Tokens(size_t n, int32_t start) {
  std::vector<int32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = start + int32_t(i);
  return t;
}

TEST(KvEventsWire, RoundTripsEveryKindAndRefusesWhatIsNotTheSchema) {
  KvEventBatch b;
  b.ts = 1234.5;
  KvEvent stored;
  stored.keys = {1, 0xffffffffffffffffull};
  stored.has_parent = true;
  stored.parent = 7;
  stored.tokens = Tokens(128, 3);
  stored.block_size = 64;
  stored.medium = "device";
  KvEvent removed;
  removed.kind = KvEvent::Kind::kRemoved;
  removed.keys = {9};
  removed.medium = "host";
  KvEvent cleared;
  cleared.kind = KvEvent::Kind::kCleared;
  b.events = {stored, removed, cleared};
  auto back = DecodeKvEventBatch(EncodeKvEventBatch(b));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->events.size(), 3u);
  EXPECT_EQ(back->ts, 1234.5);
  EXPECT_EQ(back->events[0].keys, stored.keys);
  EXPECT_TRUE(back->events[0].has_parent);
  EXPECT_EQ(back->events[0].parent, 7u);
  EXPECT_EQ(back->events[0].tokens, stored.tokens);
  EXPECT_EQ(back->events[0].medium, "device");
  EXPECT_EQ(back->events[1].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(back->events[1].keys, removed.keys);
  EXPECT_EQ(back->events[2].kind, KvEvent::Kind::kCleared);
  EXPECT_EQ(*DecodeSequence(EncodeSequence(-1)), -1);
  EXPECT_EQ(*DecodeSequence(EncodeSequence(1234567890123)), 1234567890123);
  EXPECT_FALSE(DecodeSequence("1234567").ok());

  // Hostile payloads: every one refused (or its unknown kind skipped), none crashes.
  msgpack::sbuffer unknown;
  msgpack::packer<msgpack::sbuffer> p(unknown);
  p.pack_array(2);
  p.pack_double(1);
  p.pack_array(1);
  p.pack_array(1);
  p.pack(std::string("BlockMoved"));
  auto skipped = DecodeKvEventBatch(std::string(unknown.data(), unknown.size()));
  ASSERT_TRUE(skipped.ok()) << skipped.status().message();
  EXPECT_TRUE(skipped->events.empty());
  const std::string huge_array = std::string("\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\xdd\xff\xff\xff\xff", 15);
  EXPECT_FALSE(DecodeKvEventBatch(huge_array).ok());
  EXPECT_FALSE(DecodeKvEventBatch("").ok());
  EXPECT_FALSE(DecodeKvEventBatch("\xc1").ok());
  std::string bad = EncodeKvEventBatch(b);
  for (size_t cut = 0; cut < bad.size(); cut += 7) (void)DecodeKvEventBatch(bad.substr(0, cut));
  for (int flip = 0; flip < 200; ++flip) {
    std::string damaged = bad;
    damaged[size_t(flip * 31) % damaged.size()] ^= char(1 << (flip % 8));
    (void)DecodeKvEventBatch(damaged);
  }
  KvEventBatch many;
  KvEvent big;
  big.keys.assign(100, 1);
  big.block_size = 64;
  many.events.assign(3, big);
  EXPECT_FALSE(DecodeKvEventBatch(EncodeKvEventBatch(many), 250).ok()) << "300 keys over a budget of 250";
}

PrefixIndex::Event Stored(std::vector<int32_t> tokens, uint64_t parent = kChainRootSeed) {
  PrefixIndex::Event e;
  e.kind = PrefixIndex::Event::Kind::kStored;
  e.parent_key = parent;
  e.from_root = parent == kChainRootSeed;  // as the prefix index says of a prompt's first page
  uint64_t key = parent;
  for (size_t at = 0; at + 64 <= tokens.size(); at += 64) {
    key = ChainKey(key, std::span<const int32_t>(tokens).subspan(at, 64));
    e.keys.push_back(key);
  }
  e.tokens = std::move(tokens);
  return e;
}

TEST(KvEvents, SubscribersFollowAPublisherJoinLateBySnapshotAndWithoutTheKeyHearNothing) {
  std::vector<uint8_t> secret(32, 7), other(32, 9);
  auto keys = DeriveKvCurveKeys(secret);
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  KvPublisherOptions po;
  po.topic = "tandem-0123456789abcdef";
  po.keys = *keys;
  auto pub = KvEventPublisher::Start(po);
  ASSERT_TRUE(pub.ok()) << pub.status().message();
  const KvSource source{"decode-a", (*pub)->topic(), (*pub)->events_endpoint(), (*pub)->snapshot_endpoint()};

  CachedPrefixes early_view;
  auto early = KvEventSubscriber::Start(early_view, *keys);
  ASSERT_TRUE(early.ok());
  (*early)->SetSources({source});
  ASSERT_TRUE(WaitUntil([&] { return (*early)->synced() && (*early)->counters().snapshots == 1; }, seconds(10)));

  const std::vector<int32_t> prompt = Tokens(64 * 5, 100);
  const std::vector<uint64_t> chain = ChainKeys(prompt, 64);
  auto hook = (*pub)->Hook();
  hook(Stored(std::vector<int32_t>(prompt.begin(), prompt.begin() + 64 * 3)));
  hook(Stored(std::vector<int32_t>(prompt.begin() + 64 * 3, prompt.end()), chain[2]));
  ASSERT_TRUE(WaitUntil([&] { return early_view.PrefixPages("decode-a", chain) == 5; }, seconds(10)));
  PrefixIndex::Event removed;
  removed.kind = PrefixIndex::Event::Kind::kRemoved;
  removed.keys = {chain[4], chain[3]};
  hook(removed);
  ASSERT_TRUE(WaitUntil([&] { return early_view.PrefixPages("decode-a", chain) == 3; }, seconds(10)));
  EXPECT_EQ(early_view.Longest({"decode-b", "decode-a"}, chain), 1);

  // A subscriber that joins now reads the whole cache from the snapshot.
  CachedPrefixes late_view;
  auto late = KvEventSubscriber::Start(late_view, *keys);
  ASSERT_TRUE(late.ok());
  (*late)->SetSources({source});
  ASSERT_TRUE(WaitUntil([&] { return late_view.PrefixPages("decode-a", chain) == 3; }, seconds(10)));
  EXPECT_EQ(late_view.keys("decode-a"), 3u);
  // Both follow what comes next.
  hook(Stored(std::vector<int32_t>(prompt.begin() + 64 * 3, prompt.end()), chain[2]));
  ASSERT_TRUE(WaitUntil([&] { return late_view.PrefixPages("decode-a", chain) == 5 &&
                                     early_view.PrefixPages("decode-a", chain) == 5; }, seconds(10)));
  PrefixIndex::Event cleared;
  cleared.kind = PrefixIndex::Event::Kind::kCleared;
  hook(cleared);
  ASSERT_TRUE(WaitUntil([&] { return late_view.keys("decode-a") == 0 && early_view.keys("decode-a") == 0; }, seconds(10)));
  hook(Stored(std::vector<int32_t>(prompt.begin(), prompt.begin() + 64)));

  // A client that knows the publisher's key but holds another key pair: its
  // CURVE handshake is sound, and the publisher's ZAP check refuses it.
  KvCurveKeys stranger_keys = *DeriveKvCurveKeys(other);
  stranger_keys.server_public_z85 = keys->public_z85;
  CachedPrefixes stranger_view;
  auto stranger = KvEventSubscriber::Start(stranger_view, stranger_keys);
  ASSERT_TRUE(stranger.ok());
  (*stranger)->SetSources({source});
  ASSERT_TRUE(WaitUntil([&] { return early_view.keys("decode-a") == 1; }, seconds(10)));
  hook(Stored(std::vector<int32_t>(prompt.begin(), prompt.begin() + 128)));
  ASSERT_TRUE(WaitUntil([&] { return early_view.keys("decode-a") == 2; }, seconds(10)));
  EXPECT_FALSE(WaitUntil([&] { return stranger_view.keys("decode-a") > 0; }, std::chrono::milliseconds(1500)));
  EXPECT_FALSE((*stranger)->synced());
  // An engine no longer followed is forgotten.
  (*early)->SetSources({});
  ASSERT_TRUE(WaitUntil([&] { return early_view.keys("decode-a") == 0; }, seconds(10)));
  EXPECT_NE((*late)->MetricsText().find("tandem_kv_events_synced 1"), std::string::npos);
}

// A member of the cluster (it holds the key) that publishes under another
// engine's topic, its sequence numbers far ahead: its messages come on the
// connection to its own endpoint, so they are refused, and the engine whose
// topic it claims is followed as before (before, they froze that engine's
// view). One that signs a record claiming another engine's name is followed
// for neither.
TEST(KvEvents, APublisherSpeaksOnlyForItsOwnEngine) {
  std::vector<uint8_t> secret(32, 7);
  auto keys = DeriveKvCurveKeys(secret);
  ASSERT_TRUE(keys.ok()) << keys.status().message();
  KvPublisherOptions po;
  po.topic = "tandem-00000000000000aa";
  po.keys = *keys;
  auto honest = KvEventPublisher::Start(po);
  ASSERT_TRUE(honest.ok()) << honest.status().message();
  auto liar = KvEventPublisher::Start(po);  // the same topic: the honest engine's
  ASSERT_TRUE(liar.ok()) << liar.status().message();
  CachedPrefixes view;
  auto sub = KvEventSubscriber::Start(view, *keys);
  ASSERT_TRUE(sub.ok());
  (*sub)->SetSources({{"honest", (*honest)->topic(), (*honest)->events_endpoint(), (*honest)->snapshot_endpoint()},
                      // Its record names a topic of its own, a prefix of the honest one's
                      // (ZeroMQ subscriptions match prefixes, so its messages reach this
                      // subscriber and must be refused by name); it publishes under the honest one's.
                      {"liar", "tandem-000000000000", (*liar)->events_endpoint(), (*liar)->snapshot_endpoint()}});
  ASSERT_TRUE(WaitUntil([&] { return (*sub)->counters().snapshots >= 1; }, seconds(10)));
  const std::vector<int32_t> mine = Tokens(64 * 2, 100), forged = Tokens(64 * 3, 900);
  auto lie = (*liar)->Hook();
  for (int i = 0; i < 50; ++i) lie(Stored(forged));  // its numbers run ahead of the honest engine's
  ASSERT_TRUE(WaitUntil([&] { return (*liar)->published() >= 1 && (*sub)->counters().refused >= 1; }, seconds(10)))
      << (*sub)->counters().refused;
  (*honest)->Hook()(Stored(mine));
  ASSERT_TRUE(WaitUntil([&] { return view.PrefixPages("honest", ChainKeys(mine, 64)) == 2; }, seconds(10)));
  EXPECT_EQ(view.PrefixPages("honest", ChainKeys(forged, 64)), 0);
  EXPECT_EQ(view.keys("honest"), 2u);
  EXPECT_EQ((*sub)->counters().gaps, 0);
  // A second record claiming the honest engine's name (its address), with
  // the liar's endpoints: neither is followed until one claim is left.
  const int64_t refused = (*sub)->counters().refused;
  (*sub)->SetSources({{"honest", (*honest)->topic(), (*honest)->events_endpoint(), (*honest)->snapshot_endpoint()},
                      {"honest", (*honest)->topic(), (*liar)->events_endpoint(), (*liar)->snapshot_endpoint()}});
  ASSERT_TRUE(WaitUntil([&] { return view.keys("honest") == 0 && (*sub)->counters().refused > refused; }, seconds(10)));
  (*sub)->SetSources({{"honest", (*honest)->topic(), (*honest)->events_endpoint(), (*honest)->snapshot_endpoint()}});
  ASSERT_TRUE(WaitUntil([&] { return view.PrefixPages("honest", ChainKeys(mine, 64)) == 2; }, seconds(10)));
  EXPECT_EQ(view.PrefixPages("honest", ChainKeys(forged, 64)), 0);
}

}  // namespace
}  // namespace tandem::discovery
