// The files under deploy/: the Prometheus configuration passes promtool, the
// Grafana dashboard is well formed and names only metrics tandem exports, and
// the systemd units' command lines start their roles, which find each other
// from etcd alone (on a test host: support/netns.h).
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

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

namespace fs = std::filesystem;
using nlohmann::json;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path Deploy() { return fs::path(TANDEM_SOURCE_DIR) / "deploy"; }

TEST(DeployFiles, PrometheusConfigPassesPromtool) {
  if (testing::RunShell("command -v promtool", 10).exit_code != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: promtool is not installed (Debian package prometheus; scripts/install-deps.sh "
                    "installs it)";
  }
  const auto r = testing::RunShell("cd " + (Deploy() / "prometheus").string() + " && promtool check config prometheus.yml", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SUCCESS: prometheus.yml is valid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rules found"), std::string::npos) << r.output;
}

// Every metric name a dashboard query uses is one tandem exports (some are
// written as a prefix plus a name: tandem_router_ + http_...).
TEST(DeployFiles, GrafanaDashboardIsWellFormedAndNamesOnlyMetricsTandemExports) {
  const json d = json::parse(Read(Deploy() / "grafana" / "tandem.json"), nullptr, false);
  ASSERT_TRUE(d.is_object()) << "not JSON";
  for (const char* field : {"uid", "title"}) EXPECT_TRUE(d.contains(field) && d[field].is_string()) << field;
  ASSERT_TRUE(d["schemaVersion"].is_number_integer());
  ASSERT_TRUE(d["panels"].is_array());
  std::string sources;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(TANDEM_SOURCE_DIR) / "src")) {
    if (e.is_regular_file()) sources += Read(e.path());
  }
  const std::regex metric("tandem_[a-z0-9_]+");
  std::set<int> ids;
  std::set<std::string> names;
  int queries = 0;
  for (const json& p : d["panels"]) {
    ASSERT_TRUE(p.is_object());
    const std::string type = p.value("type", "");
    EXPECT_TRUE(type == "row" || type == "timeseries" || type == "stat" || type == "gauge") << type;
    EXPECT_TRUE(ids.insert(p.value("id", -1)).second) << "panel ids must be unique: " << p.dump();
    const json& g = p["gridPos"];
    ASSERT_TRUE(g.is_object()) << p.dump();
    for (const char* k : {"h", "w", "x", "y"}) ASSERT_TRUE(g[k].is_number_integer()) << p.dump();
    EXPECT_LE(g["x"].get<int>() + g["w"].get<int>(), 24) << "Grafana's grid is 24 wide: " << p.dump();
    if (type == "row") continue;
    ASSERT_TRUE(p["targets"].is_array() && !p["targets"].empty()) << p.dump();
    for (const json& t : p["targets"]) {
      ASSERT_TRUE(t["expr"].is_string() && t["refId"].is_string()) << t.dump();
      ++queries;
      const std::string expr = t["expr"];
      for (auto it = std::sregex_iterator(expr.begin(), expr.end(), metric); it != std::sregex_iterator(); ++it) {
        names.insert(std::regex_replace(it->str(), std::regex("_(bucket|sum|count)$"), ""));
      }
    }
  }
  EXPECT_GT(queries, 30);
  // A whole name in the sources (a literal, or a HELP line), or its part after a prefix the code adds.
  auto whole = [&](const std::string& name, bool quoted) {
    for (size_t at = sources.find(name); at != std::string::npos; at = sources.find(name, at + 1)) {
      const char after = at + name.size() < sources.size() ? sources[at + name.size()] : ' ';
      const char before = at > 0 ? sources[at - 1] : ' ';
      if ((std::isalnum(static_cast<unsigned char>(after)) || after == '_')) continue;
      if (quoted ? before == '"' : !(std::isalnum(static_cast<unsigned char>(before)) || before == '_')) return true;
    }
    return false;
  };
  for (const std::string& n : names) {
    const bool exported = whole(n, false) || whole(n.substr(std::string("tandem_").size()), true) ||
                          (n.rfind("tandem_router_", 0) == 0 && whole(n.substr(std::string("tandem_router_").size()), true));
    EXPECT_TRUE(exported) << n << " is not a metric tandem exports";
  }
  for (const char* wanted : {"tandem_request_phase_seconds_total", "tandem_prefill_links_up", "tandem_tier_pages",
                             "tandem_router_forwarded_total", "tandem_discovery_reachable"}) {
    EXPECT_TRUE(names.count(wanted)) << "the dashboard shows no " << wanted;
  }
}

// A unit's ExecStart with its ${VARS} from `env` and the line continuations joined.
std::vector<std::string> ExecStart(const std::string& unit, const std::map<std::string, std::string>& env) {
  std::string text = std::regex_replace(Read(Deploy() / "systemd" / unit), std::regex("\\\\\n"), " ");
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\nExecStart=([^\n]*)"))) return {};
  std::string line = m[1];
  for (const auto& [k, v] : env) line = std::regex_replace(line, std::regex("\\$\\{" + k + "\\}"), v);
  std::istringstream words(line);
  std::vector<std::string> out;
  for (std::string w; words >> w;) out.push_back(w);
  return out;
}

TEST(DeployFiles, SystemdUnitsVerifyAndTheirCommandsStartRolesThatFindEachOtherInEtcd) {
  if (testing::EtcdBinary().empty()) GTEST_SKIP() << "SKIPPED LOUDLY: etcd is not installed";
  testing::TestHosts hosts(1);
  if (!hosts.ok()) GTEST_SKIP() << "SKIPPED LOUDLY: no test host: " << hosts.why();
  const std::string dir = testing::MakeTempDir();
  if (testing::RunShell("command -v systemd-analyze", 10).exit_code == 0) {
    for (const char* unit : {"tandem-prefill.service", "tandem-decode.service", "tandem-router.service"}) {
      std::string text = Read(Deploy() / "systemd" / unit);
      text = std::regex_replace(text, std::regex("/usr/local/bin/tandem"), testing::TandemBinary());
      text = std::regex_replace(text, std::regex("\nUser=tandem\nGroup=tandem"), "");  // no such user here
      std::ofstream(dir + "/" + unit) << text;
      const auto r = testing::RunShell("systemd-analyze verify " + dir + "/" + unit, 60);
      EXPECT_EQ(r.exit_code, 0) << unit << ": " << r.output;
      EXPECT_EQ(r.output.find(unit), std::string::npos) << unit << ": " << r.output;
    }
  }
  testing::EtcdProcess etcd(hosts.address(0), hosts.name(0));
  ASSERT_TRUE(etcd.Start()) << etcd.why();
  std::ofstream(dir + "/cluster.key") << "the deploy test's cluster key, 16+ bytes\n";
  std::ofstream(dir + "/api-keys") << "deploy-test-key\n";
  std::ofstream(dir + "/admin-keys") << "deploy-test-operator-key\n";
  // The units' values for one host; sizes scaled down to a test's.
  const std::map<std::string, std::string> env = {{"TANDEM_MODEL", testing::TinyModelPath()},
                                                  {"TANDEM_DISCOVERY", etcd.Url("/deploy")},
                                                  {"TANDEM_CLUSTER_KEY", dir + "/cluster.key"},
                                                  {"TANDEM_HOST", hosts.address(0)},
                                                  {"TANDEM_THREADS", "1"},
                                                  {"TANDEM_API_KEYS", dir + "/api-keys"},
                                                  {"TANDEM_ADMIN_KEYS", dir + "/admin-keys"}};
  std::vector<std::unique_ptr<testing::ServerProcess>> roles;
  for (const auto& [unit, marker] : std::vector<std::pair<std::string, std::string>>{
           {"tandem-prefill.service", "tcp://"}, {"tandem-decode.service", "http://"}, {"tandem-router.service", "http://"}}) {
    std::vector<std::string> args = ExecStart(unit, env);
    ASSERT_GE(args.size(), 3u) << unit;
    ASSERT_EQ(args[0], "/usr/local/bin/tandem") << unit;
    args.erase(args.begin());
    int port = 0;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--port") {
        port = std::stoi(args[i + 1]);
        args.erase(args.begin() + long(i), args.begin() + long(i) + 2);
        break;
      }
    }
    for (auto& a : args) {
      if (a == "8G") a = "256M";
      if (a == "200G") a = "1G";
      if (a.rfind("/var/cache/tandem", 0) == 0) a = dir + "/cache";
    }
    const std::string host = unit == "tandem-router.service" ? "0.0.0.0" : hosts.address(0);
    roles.push_back(std::make_unique<testing::ServerProcess>(args, 60, marker + host + ":", port, hosts.name(0)));
    ASSERT_TRUE(roles.back()->ok()) << unit << ": " << roles.back()->Log();
  }
  // The decode server links the prefill engine it found (before that it would compute prompts itself).
  ASSERT_TRUE(testing::WaitUntil([&] {
    std::string text;
    hosts.RunIn(0, [&] {
      httplib::Client cli(hosts.address(0), 8081);
      if (auto res = cli.Get("/metrics")) text = res->body;
    });
    return text.find("tandem_prefill_links_up 1") != std::string::npos;
  }, std::chrono::seconds(30), std::chrono::milliseconds(100))) << roles[1]->Log();
  // The router found the decode server, which found the prefill engine: an answer through it.
  testing::HttpResult answer;
  ASSERT_TRUE(testing::WaitUntil([&] {
    hosts.RunIn(0, [&] {
      httplib::Client cli(hosts.address(0), 8080);
      cli.set_read_timeout(std::chrono::seconds(30));
      cli.set_bearer_token_auth("deploy-test-key");
      if (auto res = cli.Post("/v1/completions", R"({"prompt":"from the units","max_tokens":4})", "application/json")) {
        answer = {res->status, res->body, {}};
      }
    });
    return answer.status == 200;
  }, std::chrono::seconds(30), std::chrono::milliseconds(200))) << answer.status << " " << answer.body << roles[2]->Log();
  std::string metrics;
  hosts.RunIn(0, [&] {
    httplib::Client cli(hosts.address(0), 8081);
    if (auto res = cli.Get("/metrics")) metrics = res->body;
  });
  EXPECT_NE(metrics.find("tandem_handoffs_total{outcome=\"committed\"} 1"), std::string::npos) << metrics;
}

}  // namespace
}  // namespace tandem
