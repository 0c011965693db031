// Discovery against a real etcd: registration under a lease, watches that see
// every change, a lease that lapses, etcd going away and coming back.
#include "discovery/discovery.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <mutex>

#include "support/etcd_process.h"
#include "support/wait.h"

namespace tandem::discovery {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::EtcdProcess;
using testing::WaitUntil;

#define TANDEM_REQUIRE_ETCD()                                                                      \
  if (testing::EtcdBinary().empty()) {                                                             \
    GTEST_SKIP() << "SKIPPED LOUDLY: etcd is not installed (scripts/install-deps.sh installs "     \
                    "etcd-server); discovery is untested here";                                    \
  }

// The newest view a watch delivered.
struct View {
  std::mutex mu;
  std::vector<EngineRecord> records;
  int deliveries = 0;
  void Set(const std::vector<EngineRecord>& r) {
    std::lock_guard lock(mu);
    records = r;
    ++deliveries;
  }
  std::vector<std::string> Addresses() {
    std::lock_guard lock(mu);
    std::vector<std::string> out;
    for (const auto& r : records) out.push_back(r.address);
    return out;
  }
  size_t size() {
    std::lock_guard lock(mu);
    return records.size();
  }
  int delivered() {
    std::lock_guard lock(mu);
    return deliveries;
  }
};

DiscoveryOptions Options(const EtcdProcess& etcd, const std::string& prefix, int64_t ttl_s = 10) {
  DiscoveryOptions o;
  o.etcd = *ParseEtcdUrl(etcd.Url(prefix));
  o.ttl_s = ttl_s;
  o.retry = milliseconds(200);
  o.watch_idle = milliseconds(500);
  return o;
}

EngineRecord Prefill(uint64_t instance, const std::string& address) {
  EngineRecord r;
  r.role = "prefill";
  r.instance = instance;
  r.address = address;
  r.transport = "tcp";
  r.layout = "layout";
  r.weights = "weights";
  return r;
}

TEST(EtcdUrl, ParsesHostPortAndPrefixAndRefusesTheRest) {
  auto e = ParseEtcdUrl("etcd://10.0.0.1:2379/prod/tandem/");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->host, "10.0.0.1");
  EXPECT_EQ(e->port, 2379);
  EXPECT_EQ(e->prefix, "/prod/tandem");
  EXPECT_EQ(ParseEtcdUrl("etcd://h")->prefix, "/tandem");
  EXPECT_EQ(ParseEtcdUrl("etcd://h")->port, 2379);
  for (const char* bad : {"http://h:1/x", "etcd://:2379/x", "etcd://h:0/x", "etcd://h:99999/x", "etcd://h:12a/x",
                          "etcd://h:1/a b"}) {
    EXPECT_FALSE(ParseEtcdUrl(bad).ok()) << bad;
  }
  EXPECT_EQ(PrefixRangeEnd("/t/prefill/"), "/t/prefill0");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff", 2)), "b");
}

TEST(EngineRecord, RoundTripsAndRefusesMalformedRecords) {
  EngineRecord r = Prefill(18446744073709551615ull, "10.1.2.3:7000");
  r.load = 7;
  auto back = EngineRecord::FromJson(r.ToJson());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->ToJson(), r.ToJson());
  for (const char* bad : {"", "[]", "{\"role\":\"prefill\"}", "{\"role\":\"prefill\",\"address\":\"h\",\"instance\":\"1\"}",
                          "{\"role\":\"prefill\",\"address\":\"h:1\",\"instance\":\"x\"}",
                          "{\"role\":1,\"address\":\"h:1\",\"instance\":\"1\"}"}) {
    EXPECT_FALSE(EngineRecord::FromJson(bad).ok()) << bad;
  }
  EXPECT_FALSE(EngineRecord::FromJson(std::string(70000, ' ')).ok());
}

TEST(Discovery, AWatcherSeesEnginesComeAndGoAndAStoppedEngineLeavesAtOnce) {
  TANDEM_REQUIRE_ETCD();
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  View view;
  Discovery watcher(Options(etcd, "/w"));
  watcher.Watch("prefill", [&](const std::vector<EngineRecord>& r) { view.Set(r); });
  ASSERT_TRUE(WaitUntil([&] { return view.delivered() >= 1; }, seconds(10)));  // the first (empty) view
  EXPECT_EQ(view.size(), 0u);
  auto a = std::make_unique<Discovery>(Options(etcd, "/w"));
  a->Register([] { return Prefill(1, "10.0.0.1:1"); });
  Discovery b(Options(etcd, "/w"));
  int64_t load = 0;
  std::mutex load_mu;
  b.Register([&] {
    std::lock_guard lock(load_mu);
    EngineRecord r = Prefill(2, "10.0.0.2:2");
    r.load = load;
    return r;
  });
  Discovery other(Options(etcd, "/elsewhere"));  // another deployment's prefix is not seen
  other.Register([] { return Prefill(3, "10.0.0.3:3"); });
  ASSERT_TRUE(WaitUntil([&] { return view.size() == 2; }, seconds(10))) << view.size();
  auto addresses = view.Addresses();
  EXPECT_NE(std::find(addresses.begin(), addresses.end(), "10.0.0.1:1"), addresses.end());
  EXPECT_NE(std::find(addresses.begin(), addresses.end(), "10.0.0.2:2"), addresses.end());
  EXPECT_TRUE(watcher.reachable());
  EXPECT_EQ(watcher.Health()["peers"]["prefill"], 2);
  EXPECT_NE(watcher.MetricsText().find("tandem_discovery_peers{role=\"prefill\"} 2"), std::string::npos);
  // A stopped engine revokes its lease: gone well before its TTL (10 s).
  const auto stopped = std::chrono::steady_clock::now();
  a.reset();
  ASSERT_TRUE(WaitUntil([&] { return view.size() == 1; }, seconds(5)));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, seconds(5));
  EXPECT_EQ(view.Addresses(), std::vector<std::string>{"10.0.0.2:2"});
}

TEST(Discovery, AnEngineThatStopsKeepingItsLeaseAliveLeavesWithinItsTtl) {
  TANDEM_REQUIRE_ETCD();
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  View view;
  Discovery watcher(Options(etcd, "/ttl"));
  watcher.Watch("prefill", [&](const std::vector<EngineRecord>& r) { view.Set(r); });
  // A registration whose process vanished: a key under a 2 s lease that nobody keeps alive.
  EtcdClient client(*ParseEtcdUrl(etcd.Url("/ttl")));
  auto lease = client.GrantLease(2);
  ASSERT_TRUE(lease.ok()) << lease.status().message();
  EngineRecord vanished = Prefill(0xaa, "10.0.0.9:9");
  vanished.lease = *lease;
  ASSERT_TRUE(client.Put("/ttl/prefill/00000000000000aa", vanished.ToJson(), *lease).ok());
  ASSERT_TRUE(WaitUntil([&] { return view.size() == 1; }, seconds(5)));
  const auto put = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitUntil([&] { return view.size() == 0; }, seconds(8)));
  EXPECT_LT(std::chrono::steady_clock::now() - put, milliseconds(4000));  // 2 s TTL, etcd's expiry checks
  EXPECT_EQ(client.KeepAlive(*lease).status().code(), StatusCode::kNotFound);
  // Its record put again after its lease lapsed (a replay) is left out: it
  // names a lease that is gone, and a key put under no lease outlives none.
  ASSERT_TRUE(client.Put("/ttl/prefill/00000000000000aa", vanished.ToJson()).ok());
  // A record that is not an engine's is left out, never an error.
  ASSERT_TRUE(client.Put("/ttl/prefill/junk", "{not json").ok());
  auto live = client.GrantLease(30);
  ASSERT_TRUE(live.ok()) << live.status().message();
  EngineRecord bb = Prefill(0xbb, "10.0.0.8:8");
  bb.lease = *live;
  ASSERT_TRUE(client.Put("/ttl/prefill/00000000000000bb", bb.ToJson(), *live).ok());
  ASSERT_TRUE(WaitUntil([&] { return view.size() == 1; }, seconds(5)));
  EXPECT_EQ(view.Addresses(), std::vector<std::string>{"10.0.0.8:8"});
  // Replayed under a live lease other than the one it names, or under
  // another engine's key: left out too.
  ASSERT_TRUE(client.Put("/ttl/prefill/00000000000000aa", vanished.ToJson(), *live).ok());
  ASSERT_TRUE(client.Put("/ttl/prefill/00000000000000cc", bb.ToJson(), *live).ok());
  ASSERT_TRUE(WaitUntil([&] {
    const std::string m = watcher.MetricsText();
    return m.find("tandem_discovery_refused_records_total{role=\"prefill\",reason=\"key\"} 1") != std::string::npos &&
           m.find("tandem_discovery_refused_records_total{role=\"prefill\",reason=\"lease\"} 2") != std::string::npos &&
           m.find("tandem_discovery_refused_records_total{role=\"prefill\",reason=\"unreadable\"} 1") != std::string::npos;
  }, seconds(5))) << watcher.MetricsText();
  EXPECT_EQ(view.Addresses(), std::vector<std::string>{"10.0.0.8:8"});
}

TEST(Discovery, EtcdGoneKeepsTheLastViewAndSaysSoAndEverythingComesBackWithIt) {
  TANDEM_REQUIRE_ETCD();
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  View view;
  Discovery watcher(Options(etcd, "/gone", 2));
  watcher.Watch("prefill", [&](const std::vector<EngineRecord>& r) { view.Set(r); });
  Discovery engine(Options(etcd, "/gone", 2));
  engine.Register([] { return Prefill(5, "10.0.0.5:5"); });
  ASSERT_TRUE(WaitUntil([&] { return view.size() == 1; }, seconds(10)));
  etcd.Stop();
  ASSERT_TRUE(WaitUntil([&] { return !watcher.reachable() && !engine.reachable(); }, seconds(10)));
  EXPECT_EQ(watcher.Health()["reachable"], false);
  EXPECT_TRUE(watcher.Health().contains("error"));
  EXPECT_NE(watcher.MetricsText().find("tandem_discovery_reachable 0"), std::string::npos);
  EXPECT_EQ(view.Addresses(), std::vector<std::string>{"10.0.0.5:5"});  // the last view stands
  // etcd comes back empty (its data lost, the lease with it): the engine
  // finds its lease gone and registers again; the watcher reads the view again.
  etcd.Wipe();
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  ASSERT_TRUE(WaitUntil([&] { return watcher.reachable() && engine.reachable(); }, seconds(15)));
  ASSERT_TRUE(WaitUntil([&] { return view.size() == 1 && engine.Health()["registered"] == true; }, seconds(15)));
  EXPECT_EQ(view.Addresses(), std::vector<std::string>{"10.0.0.5:5"});
  EXPECT_NE(engine.MetricsText().find("tandem_discovery_lease_grants_total 2"), std::string::npos)
      << engine.MetricsText();
}

TEST(Discovery, AWatchFromACompactedRevisionIsRefusedAsOutOfRange) {
  TANDEM_REQUIRE_ETCD();
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  EtcdClient client(*ParseEtcdUrl(etcd.Url("/c")));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(client.Put("/c/prefill/k", std::to_string(i)).ok());
  auto range = client.RangePrefix("/c/prefill/");
  ASSERT_TRUE(range.ok());
  // Compaction is an admin call, not part of the client: through the gateway directly.
  const std::string body = "{\"revision\":\"" + std::to_string(range->revision) + "\"}";
  httplib::Client http("127.0.0.1", etcd.port());
  ASSERT_TRUE(http.Post("/v3/kv/compaction", body, "application/json"));
  std::atomic<bool> stop{false};
  Status st = client.Watch("/c/prefill/", 1, [](const std::vector<EtcdEvent>&, int64_t) { return true; }, stop,
                           milliseconds(500));
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.message();
}

}  // namespace
}  // namespace tandem::discovery
