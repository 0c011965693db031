// Engines that find each other on etcd: started from discovery alone (no
// address given to any engine but etcd's), following every change, on
// 127.0.0.1 and across "hosts" (network namespaces, support/netns.h) over
// --transport tcp.
#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <nlohmann/json.hpp>

#include "support/disagg_client.h"
#include "support/etcd_process.h"
#include "support/http_client.h"
#include "support/netns.h"
#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"
#include "support/wait.h"

namespace tandem {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::EtcdProcess;
using testing::ServerProcess;
using testing::WaitUntil;

#define TANDEM_REQUIRE_ETCD()                                                                      \
  if (testing::EtcdBinary().empty()) {                                                             \
    GTEST_SKIP() << "SKIPPED LOUDLY: etcd is not installed (scripts/install-deps.sh installs "     \
                    "etcd-server); discovery is untested here";                                    \
  }

json Health(int port) {
  return json::parse(testing::HttpGet(port, "/health").body, nullptr, false);
}

int64_t Peers(const json& health, const char* role) {
  if (!health.is_object() || !health.contains("discovery")) return -1;
  return health["discovery"]["peers"].value(role, int64_t(0));
}

// The tandem processes of one deployment share a cluster key and a discovery URL.
std::vector<std::string> Engine(std::vector<std::string> args, const std::string& url,
                                std::vector<std::string> extra = {}) {
  args.insert(args.end(), {"-m", testing::TinyModelPath(), "--discovery", url, "--discovery-ttl", "3",
                           "--transport", "tcp", "--peer-timeout-ms", "1000"});
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// One host: a prefill engine joins, the first is killed and leaves every list
// within its lease, a decode server that stops leaves the router's list at
// once and is found again when it comes back; answers equal colocated serve.
TEST(DiscoveryE2E, EnginesStartedFromDiscoveryAloneFollowEveryChange) {
  TANDEM_REQUIRE_ETCD();
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  const std::string url = etcd.Url("/one");
  auto prefill0 = std::make_unique<ServerProcess>(Engine({"prefill"}, url), 60, "tcp://127.0.0.1:");
  ASSERT_TRUE(prefill0->ok()) << prefill0->Log();
  auto decode = std::make_unique<ServerProcess>(Engine({"serve", "--model-id", "tiny"}, url));
  ASSERT_TRUE(decode->ok()) << decode->Log();
  ServerProcess router({"router", "--discovery", url, "--discovery-ttl", "3"});
  ASSERT_TRUE(router.ok()) << router.Log();
  ServerProcess colocated({"serve", "-m", testing::TinyModelPath(), "--model-id", "tiny"});
  ASSERT_TRUE(colocated.ok()) << colocated.Log();
  ASSERT_TRUE(WaitUntil([&] { return Peers(Health(decode->port()), "prefill") == 1 && Health(decode->port())["status"] == "ok"; },
                        seconds(20)))
      << Health(decode->port()).dump() << decode->Log();
  ASSERT_TRUE(WaitUntil([&] { return Health(router.port())["status"] == "ok"; }, seconds(20)))
      << Health(router.port()).dump() << router.Log();
  EXPECT_EQ(Peers(Health(router.port()), "decode"), 1);
  auto same = [&](int i) {
    const std::string want = testing::Complete(colocated.port(), testing::Prompt(i), 12);
    EXPECT_EQ(testing::Complete(router.port(), testing::Prompt(i), 12), want) << "prompt " << i;
  };
  same(0);
  auto committed = [&] {
    return testing::ParseMetrics(testing::HttpGet(decode->port(), "/metrics").body)["tandem_handoffs_total{outcome=\"committed\"}"];
  };
  EXPECT_EQ(committed(), 1) << "the prompt was not handed off by the prefill engine found in etcd";

  // A second prefill engine: found and linked without restarting anything.
  ServerProcess prefill1(Engine({"prefill"}, url), 60, "tcp://127.0.0.1:");
  ASSERT_TRUE(prefill1.ok()) << prefill1.Log();
  ASSERT_TRUE(WaitUntil([&] { return Peers(Health(decode->port()), "prefill") == 2; }, seconds(10)));
  ASSERT_TRUE(WaitUntil([&] { return testing::ParseMetrics(testing::HttpGet(decode->port(), "/metrics").body)["tandem_prefill_links_up"] == 2; },
                        seconds(10)));
  // The first dies without a word: it leaves the list when its lease lapses (3 s).
  prefill0->Kill9();
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitUntil([&] { return Peers(Health(decode->port()), "prefill") == 1; }, seconds(10)));
  const double left_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LT(left_s, 3.0 + 2.0) << "a lease of 3 s";
  const double before = committed();
  for (int i = 1; i <= 3; ++i) same(i);
  EXPECT_EQ(committed(), before + 3) << "prompts were not handed off to the engine that joined";

  // A decode server that stops revokes its lease: the router unlists it at once.
  decode->Terminate();
  ASSERT_TRUE(WaitUntil([&] { return Peers(Health(router.port()), "decode") == 0; }, seconds(5)));
  EXPECT_EQ(testing::HttpGet(router.port(), "/health").status, 503);
  decode = std::make_unique<ServerProcess>(Engine({"serve", "--model-id", "tiny"}, url));
  ASSERT_TRUE(decode->ok()) << decode->Log();
  ASSERT_TRUE(WaitUntil([&] { return Health(router.port())["status"] == "ok"; }, seconds(20)))
      << Health(router.port()).dump();
  same(4);
  const std::string metrics = testing::HttpGet(router.port(), "/metrics").body;
  EXPECT_NE(metrics.find("tandem_discovery_peers{role=\"decode\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tandem_discovery_reachable 1"), std::string::npos) << metrics;
}

// Refusals with the reason: a bad discovery URL, an unadvertisable address,
// a router with neither --decode nor --discovery, discovery under --disagg.
TEST(DiscoveryE2E, MisconfiguredDiscoveryIsRefusedWithTheReason) {
  const std::string m = testing::TinyModelPath();
  auto r = testing::RunTandem("prefill -m " + m + " --insecure-no-cluster-key --discovery http://x:1/p", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("etcd://HOST:PORT/PREFIX"), std::string::npos) << r.output;
  r = testing::RunTandem("serve -m " + m + " --host 0.0.0.0 --discovery etcd://127.0.0.1:1/p --cluster-key-file /dev/null", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--advertise"), std::string::npos) << r.output;
  r = testing::RunTandem("router", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--discovery"), std::string::npos) << r.output;
  r = testing::RunTandem("serve --disagg -m " + m + " --discovery etcd://127.0.0.1:1/p", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--disagg wires"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem
