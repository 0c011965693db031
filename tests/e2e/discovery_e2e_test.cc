// Engines that find each other on etcd: started from discovery alone (no
// address given to any engine but etcd's), following every change, on
// 127.0.0.1 and across "hosts" (network namespaces, support/netns.h) over
// --transport tcp.
#include <gtest/gtest.h>
#include <signal.h>
#include <httplib.h>
#include <openssl/evp.h>

#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>
#include <nlohmann/json.hpp>

#include "discovery/discovery.h"
#include "support/disagg_client.h"
#include "support/etcd_process.h"
#include "support/http_client.h"
#include "support/netns.h"
#include "support/paths.h"
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
  auto links_up = [&](int port) {
    return testing::ParseMetrics(testing::HttpGet(port, "/metrics").body)["tandem_prefill_links_up"];
  };
  // ("ok" alone would not do: with no link a decode server computes prompts itself.)
  ASSERT_TRUE(WaitUntil([&] { return Peers(Health(decode->port()), "prefill") == 1 && Health(decode->port())["status"] == "ok" &&
                                     links_up(decode->port()) == 1; },
                        seconds(20)))
      << Health(decode->port()).dump() << decode->Log();
  ASSERT_TRUE(WaitUntil([&] { return Health(router.port())["status"] == "ok"; }, seconds(20)))
      << Health(router.port()).dump() << router.Log();
  EXPECT_EQ(Peers(Health(router.port()), "decode"), 1);
  // A record no engine of this cluster signed (anyone who can write to etcd
  // could add one): left out, never listed, no request goes there.
  {
    discovery::EtcdClient etcd_client(*discovery::ParseEtcdUrl(url));
    discovery::EngineRecord forged;
    forged.role = "decode";
    forged.instance = 1;
    forged.address = "127.0.0.1:9";
    ASSERT_TRUE(etcd_client.Put("/one/decode/0000000000000001", forged.ToJson()).ok());
    EXPECT_TRUE(WaitUntil([&] { return router.Log().find("ignoring /one/decode/0000000000000001: its record is not signed") !=
                                       std::string::npos; }, seconds(10))) << router.Log();
    EXPECT_EQ(Peers(Health(router.port()), "decode"), 1);
    EXPECT_EQ(testing::HttpGet(router.port(), "/metrics").body.find("127.0.0.1:9"), std::string::npos);
    ASSERT_TRUE(etcd_client.Delete("/one/decode/0000000000000001").ok());
  }
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
  ASSERT_TRUE(WaitUntil([&] { return Health(router.port())["status"] == "ok" && links_up(decode->port()) == 1; },
                        seconds(20)))
      << Health(router.port()).dump();
  same(4);
  const std::string metrics = testing::HttpGet(router.port(), "/metrics").body;
  EXPECT_NE(metrics.find("tandem_discovery_peers{role=\"decode\"} 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tandem_discovery_reachable 1"), std::string::npos) << metrics;
}

// Placement by KV events: a router that restarts knows nothing of the
// conversations it placed, yet sends each one's next round to the decode
// server holding its prefix (the decode servers' snapshots tell it), and
// decode servers send prompts to the prefill engine holding their prefix.
// (With --placement conversation the restarted router spreads them by load:
// the synced wait and the placement count below fail.)
TEST(DiscoveryE2E, RequestsGoWhereTheirPrefixIsCachedEvenAfterTheRouterRestarts) {
  TANDEM_REQUIRE_ETCD();
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  const std::string url = etcd.Url("/kv");
  std::vector<std::unique_ptr<ServerProcess>> engines;
  for (int i = 0; i < 2; ++i) {
    engines.push_back(std::make_unique<ServerProcess>(Engine({"prefill"}, url), 60, "tcp://127.0.0.1:"));
    engines.push_back(std::make_unique<ServerProcess>(Engine({"serve"}, url)));
  }
  for (auto& e : engines) ASSERT_TRUE(e->ok()) << e->Log();
  const std::vector<int> decodes = {engines[1]->port(), engines[3]->port()};
  const std::vector<std::string> router_args = {"router", "--discovery", url, "-m", testing::TinyModelPath()};
  auto router = std::make_unique<ServerProcess>(router_args);
  ASSERT_TRUE(router->ok()) << router->Log();
  auto metric = [](int port, const std::string& name) {
    return testing::ParseMetrics(testing::HttpGet(port, "/metrics").body)[name];
  };
  auto synced = [&](int port) { return metric(port, "tandem_kv_events_synced") == 1; };
  ASSERT_TRUE(WaitUntil([&] {
    return Peers(Health(router->port()), "decode") == 2 && Health(router->port())["status"] == "ok" &&
           synced(router->port()) && Peers(Health(decodes[0]), "prefill") == 2 && Peers(Health(decodes[1]), "prefill") == 2 &&
           synced(decodes[0]) && synced(decodes[1]);
  }, seconds(30))) << Health(router->port()).dump() << router->Log();
  // Four conversations, each round resending the whole history (many pages).
  std::vector<std::vector<int32_t>> history(4);
  for (int c = 0; c < 4; ++c) history[size_t(c)] = testing::Prompt(40 + c);
  auto round = [&](int port) {
    for (auto& h : history) {
      const std::vector<int32_t> more = testing::Prompt(int(h.size()) % 7);
      h.insert(h.end(), more.begin(), more.end());
      int status = 0;
      const std::string text = testing::Complete(port, h, 4, &status);
      ASSERT_EQ(status, 200) << text;
    }
  };
  auto hits = [&] { return metric(decodes[0], "tandem_prefix_cache_hit_tokens_total") +
                           metric(decodes[1], "tandem_prefix_cache_hit_tokens_total"); };
  round(router->port());
  round(router->port());
  EXPECT_GE(metric(router->port(), "tandem_router_cached_placements_total"), 4);
  // The router restarts: no conversation memory; the KV events' snapshots say where each prefix is.
  router.reset();
  router = std::make_unique<ServerProcess>(router_args);
  ASSERT_TRUE(router->ok()) << router->Log();
  ASSERT_TRUE(WaitUntil([&] { return Peers(Health(router->port()), "decode") == 2 && synced(router->port()) &&
                                     Health(router->port())["status"] == "ok"; }, seconds(30)));
  int64_t held_pages = 0;
  for (const auto& h : history) held_pages += int64_t(h.size()) / 64;
  const double before = hits();
  round(router->port());
  const double gained = hits() - before;
  EXPECT_EQ(metric(router->port(), "tandem_router_cached_placements_total"), 4);
  EXPECT_GE(gained, double(held_pages - 4) * 64) << "a round after the restart went where its prefix was not";
  // And the decode servers placed prompts on the prefill engine holding their prefix.
  EXPECT_GT(metric(decodes[0], "tandem_prefill_cached_placements_total") +
                metric(decodes[1], "tandem_prefill_cached_placements_total"), 0);
}

// Resident memory of a process, from /proc; -1 when unreadable.
int64_t ResidentBytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

std::string Base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  out.resize(size_t(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                    reinterpret_cast<const unsigned char*>(bytes.data()), int(bytes.size()))));
  return out;
}

double RefusedRecords(int port) {
  double n = 0;
  for (const auto& [name, v] : testing::ParseMetrics(testing::HttpGet(port, "/metrics").body)) {
    if (name.rfind("tandem_discovery_refused_records_total", 0) == 0) n += v;
  }
  return n;
}

// Anyone who can write to etcd floods the engines' prefixes: 6,000 junk
// records of 10 KB (random bytes, text that is no record, well-formed records
// nobody signed, a genuine record replayed under other keys) and 10 of 1 MB.
// The router and the decode server keep serving, a router started after the
// flood finds the decode server, a prefill engine started after it is linked
// within its lease's TTL, neither process grows by 64 MiB, and an engine's
// record replayed after it died (under a fresh lease) is never taken.
TEST(DiscoveryE2E, AFloodWrittenToEtcdFreezesNoViewAndCostsLittleMemory) {
  TANDEM_REQUIRE_ETCD();
  EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  const std::string url = etcd.Url("/flood");
  auto prefill0 = std::make_unique<ServerProcess>(Engine({"prefill"}, url), 60, "tcp://127.0.0.1:");
  ASSERT_TRUE(prefill0->ok()) << prefill0->Log();
  ServerProcess decode(Engine({"serve", "--model-id", "tiny"}, url));
  ASSERT_TRUE(decode.ok()) << decode.Log();
  const std::vector<std::string> router_args = {"router", "--discovery", url, "--discovery-ttl", "3"};
  ServerProcess router(router_args);
  ASSERT_TRUE(router.ok()) << router.Log();
  auto links_up = [&] { return testing::ParseMetrics(testing::HttpGet(decode.port(), "/metrics").body)["tandem_prefill_links_up"]; };
  ASSERT_TRUE(WaitUntil([&] { return links_up() == 1 && Health(router.port())["status"] == "ok"; }, seconds(20)))
      << Health(router.port()).dump() << decode.Log();
  int status = 0;
  const std::string answer = testing::Complete(router.port(), testing::Prompt(0), 8, &status);
  ASSERT_EQ(status, 200) << answer;
  const int64_t rss_router = ResidentBytes(router.pid()), rss_decode = ResidentBytes(decode.pid());
  ASSERT_GT(rss_router, 0);
  ASSERT_GT(rss_decode, 0);

  discovery::EtcdClient etcd_client(*discovery::ParseEtcdUrl(url));
  auto genuine = etcd_client.RangePrefix("/flood/prefill/");
  ASSERT_TRUE(genuine.ok() && genuine->kvs.size() == 1);
  const std::string genuine_key = genuine->kvs[0].key, genuine_value = genuine->kvs[0].value;
  // The flood, 80 puts a transaction (etcd takes up to 128 and 1.5 MiB a request).
  httplib::Client http("127.0.0.1", etcd.port());
  http.set_read_timeout(seconds(30));
  std::mt19937_64 rng(41);
  const auto flood_began = std::chrono::steady_clock::now();
  for (const char* role : {"prefill", "decode"}) {
    json ops = json::array();
    auto flush = [&] {
      if (ops.empty()) return;
      auto res = http.Post("/v3/kv/txn", json{{"success", ops}}.dump(), "application/json");
      ASSERT_TRUE(res && res->status == 200) << (res ? res->body.substr(0, 300) : "no answer");
      ops = json::array();
    };
    for (int i = 0; i < 3000; ++i) {
      char id[24];
      std::snprintf(id, sizeof(id), "%016x", 0x10000 + i);
      std::string key = std::string("/flood/") + role + "/" + id, value;
      switch (i % 4) {
        case 0:
          key = std::string("/flood/") + role + "/junk-" + std::to_string(i);
          for (int b = 0; b < 10240; ++b) value.push_back(char(rng()));
          break;
        case 1: value.assign(10240, 'x'); break;
        case 2: {
          discovery::EngineRecord r;
          r.role = role;
          r.instance = 0x10000 + uint64_t(i);
          r.address = "127.0.0.1:" + std::to_string(10000 + i);
          r.layout = std::string(10000, 'l');
          value = r.ToJson();  // well-formed, unsigned, under no lease
          break;
        }
        default: value = genuine_value;  // a genuine record under another engine's key
      }
      ops.push_back({{"request_put", {{"key", Base64(key)}, {"value", Base64(value)}}}});
      if (ops.size() == 80) flush();
    }
    flush();
    for (int j = 0; j < 5; ++j) {
      ASSERT_TRUE(etcd_client.Put(std::string("/flood/") + role + "/big-" + std::to_string(j), std::string(1000000, '{')).ok());
    }
  }
  const double flood_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - flood_began).count();
  // Both watchers have read past it (each junk record counted, none kept).
  ASSERT_TRUE(WaitUntil([&] { return RefusedRecords(decode.port()) >= 3005 && RefusedRecords(router.port()) >= 3005; },
                        seconds(60)))
      << RefusedRecords(decode.port()) << " " << RefusedRecords(router.port());
  EXPECT_EQ(Peers(Health(decode.port()), "prefill"), 1);
  EXPECT_EQ(Peers(Health(router.port()), "decode"), 1);
  EXPECT_EQ(testing::Complete(router.port(), testing::Prompt(0), 8, &status), answer);
  EXPECT_EQ(status, 200);

  // A router started after the flood reads the decode prefix page by page and finds the one engine in it.
  ServerProcess late_router(router_args);
  ASSERT_TRUE(late_router.ok()) << late_router.Log();
  ASSERT_TRUE(WaitUntil([&] { return Health(late_router.port())["status"] == "ok"; }, seconds(30)))
      << Health(late_router.port()).dump() << late_router.Log();
  EXPECT_EQ(Peers(Health(late_router.port()), "decode"), 1);
  EXPECT_EQ(testing::Complete(late_router.port(), testing::Prompt(0), 8, &status), answer);
  // A prefill engine started after the flood: linked within its lease's TTL (3 s).
  ServerProcess prefill1(Engine({"prefill"}, url), 60, "tcp://127.0.0.1:");
  ASSERT_TRUE(prefill1.ok()) << prefill1.Log();
  const auto joined = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitUntil([&] { return Peers(Health(decode.port()), "prefill") == 2 && links_up() == 2; }, seconds(10)))
      << Health(decode.port()).dump();
  const double join_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - joined).count();
  EXPECT_LT(join_s, 3.0);
  const int64_t grew_router = ResidentBytes(router.pid()) - rss_router, grew_decode = ResidentBytes(decode.pid()) - rss_decode;
#if !defined(TANDEM_SANITIZED)  // AddressSanitizer's quarantine keeps 256 MiB of freed memory resident
  EXPECT_LT(grew_router, int64_t(64) << 20);
  EXPECT_LT(grew_decode, int64_t(64) << 20);
#endif

  // The first prefill engine dies; its record, replayed under a lease the writer holds, is not taken.
  prefill0->Kill9();
  ASSERT_TRUE(WaitUntil([&] { return Peers(Health(decode.port()), "prefill") == 1; }, seconds(10)));
  auto lease = etcd_client.GrantLease(60);
  ASSERT_TRUE(lease.ok());
  const auto lease_refusals = [&] {
    return testing::ParseMetrics(testing::HttpGet(decode.port(), "/metrics").body)
        ["tandem_discovery_refused_records_total{role=\"prefill\",reason=\"lease\"}"];
  };
  const double before = lease_refusals();
  ASSERT_TRUE(etcd_client.Put(genuine_key, genuine_value, *lease).ok());
  ASSERT_TRUE(WaitUntil([&] { return lease_refusals() > before; }, seconds(10)));
  EXPECT_EQ(Peers(Health(decode.port()), "prefill"), 1);
  EXPECT_EQ(testing::Complete(router.port(), testing::Prompt(1), 8, &status).empty(), false);
  EXPECT_EQ(status, 200);
  std::printf("etcd flood: 6,010 records (%.0f MB) written in %.1f s; resident memory grew %.1f MiB (router), "
              "%.1f MiB (decode server); a prefill engine started after it was linked in %.2f s\n",
              (6000 * 10240 + 10 * 1e6) / 1e6, flood_s, double(grew_router) / (1 << 20), double(grew_decode) / (1 << 20), join_s);
}

// Refusals with the reason: a bad discovery URL, an unadvertisable address,
// a router with neither --decode nor --discovery or with --discovery and no
// cluster key, discovery under --disagg.
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
  // A router that would send clients' requests and keys wherever a record in etcd says: only with the cluster key.
  r = testing::RunTandem("router --discovery etcd://127.0.0.1:1/p", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("needs --cluster-key-file"), std::string::npos) << r.output;
  r = testing::RunTandem("serve --disagg -m " + m + " --discovery etcd://127.0.0.1:1/p", 60);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--disagg wires"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// What a test host's process sees at http://address:port (the test's own
// thread enters that host's namespace for the call).
struct HostView {
  const testing::TestHosts& hosts;
  int from;  // the host the calls are made from
  testing::HttpResult Get(const std::string& address, int port, const std::string& path) const {
    testing::HttpResult out;
    hosts.RunIn(from, [&] {
      httplib::Client cli(address, port);
      cli.set_connection_timeout(std::chrono::milliseconds(500));
      cli.set_read_timeout(std::chrono::seconds(5));
      if (auto res = cli.Get(path)) out = {res->status, res->body, {}};
    });
    return out;
  }
  testing::HttpResult Post(const std::string& address, int port, const std::string& path, const std::string& body) const {
    testing::HttpResult out;
    hosts.RunIn(from, [&] {
      httplib::Client cli(address, port);
      cli.set_connection_timeout(std::chrono::milliseconds(500));
      cli.set_read_timeout(std::chrono::seconds(60));
      if (auto res = cli.Post(path, body, "application/json")) out = {res->status, res->body, {}};
    });
    return out;
  }
  json Health(const std::string& address, int port) const {
    return json::parse(Get(address, port, "/health").body, nullptr, false);
  }
  double Metric(const std::string& address, int port, const std::string& name) const {
    auto m = testing::ParseMetrics(Get(address, port, "/metrics").body);
    auto it = m.find(name);
    return it == m.end() ? -1 : it->second;
  }
};

// The deployment of six hosts (etcd, a router, two decode servers, two
// prefill engines) plus a client and a spare, every engine given nothing but
// etcd's address: agentic sessions run verified while a prefill host is cut
// off (it leaves every list within its lease and no round fails), a new
// prefill host joins (it is linked and takes handoffs) and etcd is stopped
// (nothing fails, /health says so); then the router restarts and finds every
// decode server again.
TEST(AcrossHosts, SixHostsStartedFromDiscoveryAloneStayExactThroughACutAJoinAndAnEtcdOutage) {
  TANDEM_REQUIRE_ETCD();
  testing::TestHosts hosts(8);
  if (!hosts.ok()) GTEST_SKIP() << "SKIPPED LOUDLY: no test hosts: " << hosts.why();
  enum { kEtcd, kRouter, kDecode0, kDecode1, kPrefill0, kPrefill1, kClient, kLate };
  const HostView client{hosts, kClient};
  EtcdProcess etcd(hosts.address(kEtcd), hosts.name(kEtcd));
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  const std::string url = etcd.Url("/six");
  auto start = [&](std::vector<std::string> args, int host, const std::string& scheme, int port = 0) {
    args.insert(args.end(), {"--host", hosts.address(host)});
    if (args[0] != "router") args = Engine(args, url);
    return std::make_unique<ServerProcess>(args, 60, scheme + hosts.address(host) + ":", port, hosts.name(host));
  };
  auto prefill0 = start({"prefill"}, kPrefill0, "tcp://");
  auto prefill1 = start({"prefill"}, kPrefill1, "tcp://");
  auto decode0 = start({"serve"}, kDecode0, "http://");
  auto decode1 = start({"serve"}, kDecode1, "http://");
  const std::vector<std::string> router_args = {"router", "--discovery", url, "--discovery-ttl", "3", "-m",
                                                testing::TinyModelPath()};
  auto router = start(router_args, kRouter, "http://", 8080);
  for (auto* p : {prefill0.get(), prefill1.get(), decode0.get(), decode1.get(), router.get()}) {
    ASSERT_TRUE(p->ok()) << p->Log();
  }
  const std::string r_addr = hosts.address(kRouter);
  const std::vector<std::pair<std::string, int>> decodes = {{hosts.address(kDecode0), decode0->port()},
                                                            {hosts.address(kDecode1), decode1->port()}};
  auto links_up = [&](double want) {
    for (const auto& [a, p] : decodes) {
      if (client.Metric(a, p, "tandem_prefill_links_up") != want) return false;
    }
    return true;
  };
  auto prefill_peers = [&](int64_t want) {
    for (const auto& [a, p] : decodes) {
      if (Peers(client.Health(a, p), "prefill") != want) return false;
    }
    return true;
  };
  ASSERT_TRUE(WaitUntil([&] { return prefill_peers(2) && links_up(2); }, seconds(30)))
      << client.Health(decodes[0].first, decodes[0].second).dump() << decode0->Log();
  ASSERT_TRUE(WaitUntil([&] { return Peers(client.Health(r_addr, 8080), "decode") == 2 &&
                                     client.Health(r_addr, 8080)["status"] == "ok"; }, seconds(30)))
      << client.Health(r_addr, 8080).dump() << router->Log();

  // Sessions from the client host, verified against the reference engine, for 30 s.
  const std::string dir = testing::MakeTempDir();
  auto bench = std::async(std::launch::async, [&] {
    return testing::RunShell("ip netns exec " + hosts.name(kClient) + " " + testing::TandemBinary() +
                                 " bench agentic --quiet --url " + r_addr + ":8080 -m " + testing::TinyModelPath() +
                                 " --preset small --out-dir " + dir +
                                 " --sweep 32 --rounds 2 --initial-tokens 384 --gen-tokens 16 --soak 30",
                             300);
  });
  // A prefill host cut off: gone from both decode servers' lists within its lease (3 s).
  ASSERT_TRUE(WaitUntil([&] { return bench.wait_for(seconds(0)) == std::future_status::ready ||
                                     client.Metric(decodes[0].first, decodes[0].second,
                                                   "tandem_handoffs_total{outcome=\"committed\"}") > 10; },
                        seconds(30)));
  ASSERT_NE(bench.wait_for(seconds(0)), std::future_status::ready)
      << (bench.wait_for(seconds(0)) == std::future_status::ready ? bench.get().output : "bench still running")
      << client.Get(decodes[0].first, decodes[0].second, "/metrics").body.substr(0, 3000);
  ASSERT_TRUE(hosts.Cut(kPrefill0));
  const auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitUntil([&] { return prefill_peers(1); }, seconds(15)));
  const double left_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut).count();
  EXPECT_LT(left_s, 3.0 + 2.5) << "the lease is 3 s";
  // A new prefill host: linked by both decode servers without a restart.
  const auto joined = std::chrono::steady_clock::now();  // its start-up (model load) included
  auto late = start({"prefill"}, kLate, "tcp://");
  ASSERT_TRUE(late->ok()) << late->Log();
  ASSERT_TRUE(WaitUntil([&] { return prefill_peers(2) && links_up(2); }, seconds(15)));
  const double join_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - joined).count();
  EXPECT_LT(join_s, 5.0);
  // etcd stopped: nothing fails, and every process says so.
  etcd.Stop();
  ASSERT_TRUE(WaitUntil([&] { return client.Health(r_addr, 8080)["discovery"]["reachable"] == false; }, seconds(10)));
  ASSERT_TRUE(WaitUntil([&] {
    return client.Health(decodes[0].first, decodes[0].second)["discovery"]["reachable"] == false;
  }, seconds(10)));
  EXPECT_EQ(client.Health(r_addr, 8080)["status"], "ok");
  EXPECT_EQ(Peers(client.Health(r_addr, 8080), "decode"), 2) << "the last view stands";
  EXPECT_TRUE(prefill_peers(2));
  std::this_thread::sleep_for(seconds(6));  // the outage itself: sessions keep running through it
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  ASSERT_TRUE(WaitUntil([&] { return client.Health(r_addr, 8080)["discovery"]["reachable"] == true; }, seconds(15)));

  ASSERT_EQ(bench.wait_for(seconds(240)), std::future_status::ready);
  const testing::ProcessResult r = bench.get();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir + "/report.json");
  std::stringstream text;
  text << in.rdbuf();
  const json report = json::parse(text.str(), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_TRUE(report["verified"].get<bool>());
  const json& outcomes = report["points"][0]["outcomes"];
  EXPECT_GT(outcomes["ok"].get<int64_t>(), 32) << outcomes.dump();
  for (const char* bad : {"corrupt", "timeout", "error"}) EXPECT_EQ(outcomes[bad].get<int64_t>(), 0) << bad << outcomes.dump();

  // The router restarted: it finds every decode server again from etcd.
  router.reset();
  router = start(router_args, kRouter, "http://", 8080);
  ASSERT_TRUE(router->ok()) << router->Log();
  ASSERT_TRUE(WaitUntil([&] { return Peers(client.Health(r_addr, 8080), "decode") == 2 &&
                                     client.Health(r_addr, 8080)["status"] == "ok"; }, seconds(15)))
      << client.Health(r_addr, 8080).dump();
  const auto answer = client.Post(r_addr, 8080, "/v1/completions",
                                  R"({"prompt":"across hosts","max_tokens":4,"temperature":0})");
  EXPECT_EQ(answer.status, 200) << answer.body;
  // The engine that joined took handoffs.
  late->Terminate();
  EXPECT_GT(testing::NumberAfter(late->Log(), "stopping ("), 0) << late->Log();
  EXPECT_GT(client.Metric(r_addr, 8080, "tandem_kv_events_synced"), 0) << "the router follows the decode servers' KV events";
  std::printf("across hosts: cut prefill left both lists in %.1f s; the new one was linked by both in %.1f s; "
              "%lld rounds ok\n", left_s, join_s, (long long)outcomes["ok"].get<int64_t>());
}

// A deployment across test hosts, every engine given only etcd's address.
struct HostDeployment {
  testing::TestHosts& hosts;
  std::string url;
  std::unique_ptr<ServerProcess> Start(std::vector<std::string> args, int host, int port = 0) {
    const std::string scheme = args[0] == "prefill" ? "tcp://" : "http://";
    args.insert(args.end(), {"--host", hosts.address(host)});
    if (args[0] != "router") args = Engine(args, url);
    return std::make_unique<ServerProcess>(args, 60, scheme + hosts.address(host) + ":", port, hosts.name(host));
  }
};

// The healing suite across hosts: a prefill host that wedges (connected,
// silent) under load is declared dead within the peer timeout; every request
// still succeeds and equals its answer before the fault (through the other
// prefill host); continued, the wedged host is linked again after its
// probation and no page stays quarantined.
TEST(AcrossHosts, AWedgedPrefillHostCostsNoRequestAndIsLinkedAgainAfterItsProbation) {
  TANDEM_REQUIRE_ETCD();
  testing::TestHosts hosts(5);
  if (!hosts.ok()) GTEST_SKIP() << "SKIPPED LOUDLY: no test hosts: " << hosts.why();
  enum { kEtcd, kDecode, kPrefill0, kPrefill1, kClient };
  const HostView client{hosts, kClient};
  EtcdProcess etcd(hosts.address(kEtcd), hosts.name(kEtcd));
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  HostDeployment d{hosts, etcd.Url("/heal")};
  auto prefill0 = d.Start({"prefill"}, kPrefill0);
  auto prefill1 = d.Start({"prefill"}, kPrefill1);
  auto decode = d.Start({"serve"}, kDecode);
  for (auto* p : {prefill0.get(), prefill1.get(), decode.get()}) ASSERT_TRUE(p->ok()) << p->Log();
  const std::string at = hosts.address(kDecode);
  const int port = decode->port();
  auto metric = [&](const std::string& name) { return client.Metric(at, port, name); };
  ASSERT_TRUE(WaitUntil([&] { return metric("tandem_prefill_links_up") == 2; }, seconds(30))) << decode->Log();
  auto ask = [&](int i) {
    json body = {{"prompt", testing::Prompt(i)}, {"max_tokens", 24}, {"temperature", 0}};
    const auto r = client.Post(at, port, "/v1/completions", body.dump());
    const json j = json::parse(r.body, nullptr, false);
    return r.status == 200 && j.is_object() ? j["choices"][0]["text"].get<std::string>() : "HTTP " + std::to_string(r.status) + ": " + r.body;
  };
  std::vector<std::string> before;
  for (int i = 0; i < 8; ++i) before.push_back(ask(i));
  // Wedge prefill host 0 while eight requests are in flight.
  std::vector<std::future<std::string>> flying;
  for (int i = 0; i < 8; ++i) flying.push_back(std::async(std::launch::async, [&, i] { return ask(i); }));
  ASSERT_EQ(kill(prefill0->pid(), SIGSTOP), 0);
  const auto wedged = std::chrono::steady_clock::now();
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(flying[size_t(i)].wait_for(seconds(60)), std::future_status::ready);
    EXPECT_EQ(flying[size_t(i)].get(), before[size_t(i)]) << "prompt " << i;
  }
  ASSERT_TRUE(WaitUntil([&] { return metric("tandem_prefill_links_declared_dead_total") >= 1; }, seconds(10)));
  EXPECT_LT(std::chrono::steady_clock::now() - wedged, seconds(10));
  for (int i = 8; i < 12; ++i) EXPECT_EQ(ask(i).rfind("HTTP", 0), std::string::npos) << "prompt " << i;
  ASSERT_EQ(kill(prefill0->pid(), SIGCONT), 0);
  ASSERT_TRUE(WaitUntil([&] { return metric("tandem_prefill_links_up") == 2; }, seconds(20))) << decode->Log();
  ASSERT_TRUE(WaitUntil([&] { return metric("tandem_handoff_quarantined_pages") == 0 &&
                                     metric("tandem_handoffs_in_flight") == 0; }, seconds(20)));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(ask(i), before[size_t(i)]) << "prompt " << i << " after the wedge";
}

// The tiers suite across hosts: small device pools with host tiers on the
// decode and the prefill host, the agentic oracle from a client host: every
// round exact, and prefixes come back from the decode server's host tier.
TEST(AcrossHosts, TieredEnginesOnSeparateHostsStayExactAndServePrefixesFromTheirHostTier) {
  TANDEM_REQUIRE_ETCD();
  testing::TestHosts hosts(4);
  if (!hosts.ok()) GTEST_SKIP() << "SKIPPED LOUDLY: no test hosts: " << hosts.why();
  enum { kEtcd, kDecode, kPrefill, kClient };
  const HostView client{hosts, kClient};
  EtcdProcess etcd(hosts.address(kEtcd), hosts.name(kEtcd));
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  HostDeployment d{hosts, etcd.Url("/tiers")};
  const std::vector<std::string> tiers = {"--cache-tokens", "4096", "--host-cache-size", "128M"};
  std::vector<std::string> prefill_args = {"prefill"}, decode_args = {"serve"};
  prefill_args.insert(prefill_args.end(), tiers.begin(), tiers.end());
  decode_args.insert(decode_args.end(), tiers.begin(), tiers.end());
  auto prefill = d.Start(prefill_args, kPrefill);
  auto decode = d.Start(decode_args, kDecode);
  for (auto* p : {prefill.get(), decode.get()}) ASSERT_TRUE(p->ok()) << p->Log();
  const std::string at = hosts.address(kDecode);
  ASSERT_TRUE(WaitUntil([&] { return client.Metric(at, decode->port(), "tandem_prefill_links_up") == 1; }, seconds(30)));
  const std::string dir = testing::MakeTempDir();
  const auto r = testing::RunShell("ip netns exec " + hosts.name(kClient) + " " + testing::TandemBinary() +
                                       " bench agentic --quiet --url " + at + ":" + std::to_string(decode->port()) +
                                       " -m " + testing::TinyModelPath() + " --preset small --sweep 8 --out-dir " + dir,
                                   300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(dir + "/report.json");
  std::stringstream text;
  text << in.rdbuf();
  const json report = json::parse(text.str(), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << r.output;
  const json& point = report["points"][0];
  EXPECT_EQ(point["outcomes"]["ok"], 24) << point.dump();
  EXPECT_GT(point["later_round_hit_rate"].get<double>(), 0.9) << point.dump();
  EXPECT_GT(client.Metric(at, decode->port(), "tandem_tier_hit_tokens_total{tier=\"l2\"}"), 0);
  EXPECT_GT(client.Metric(at, decode->port(), "tandem_handoffs_total{outcome=\"committed\"}"), 0);
}

}  // namespace
}  // namespace tandem
