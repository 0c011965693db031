// The front door (server/http_core.h) under the clients of issue 15, on real
// processes: `tandem bench frontdoor` against serve, and against a router in
// front of serve. 2,000 concurrent streams equal to their answers alone,
// /health answering throughout, 500 slowloris connections closed at their
// deadline while a real request is served, a 1 GiB chunked body refused
// without buffering it, and 100 non-streaming clients that hang up cancelled
// with their pages freed. Bounds on times here are loose (shared, noisy
// machines, sanitizer builds): the measured numbers are in the bench's report.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

const std::vector<std::string> kLimits = {"--header-timeout", "2", "--body-timeout", "2"};

Json RunBench(int port, int engine_port, const std::string& dir) {
  const std::string json = dir + "/frontdoor.json";
  auto run = testing::RunTandem("bench frontdoor --port " + std::to_string(port) + " --engine-port " +
                                    std::to_string(engine_port) +
                                    " --idle 1000 --streams 2000 --prompts 200 --max-tokens 16 --slowloris 500"
                                    " --big-body-bytes 1073741824 --hang-ups 100 --hang-up-max-tokens 3000"
                                    " --phase-timeout 240 --json " + json,
                                900);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  std::ifstream in(json);
  Json r = Json::parse(in, nullptr, false);
  EXPECT_TRUE(r.is_object()) << run.output;
  std::printf("%s\n", run.output.c_str());
  return r.is_object() ? r : Json::object();
}

void ExpectFrontDoorHolds(const Json& r) {
  ASSERT_TRUE(r.contains("streams")) << r.dump();
  EXPECT_EQ(r["error"], "");
  EXPECT_GE(r["idle"]["held"].get<int64_t>(), 1000) << "every idle connection is held";
  const Json& s = r["streams"];
  EXPECT_EQ(s["ok"], 2000) << s.dump();
  EXPECT_EQ(s["equal_to_alone"], 2000) << "every stream gets all its tokens, equal to its answer alone";
  EXPECT_GT(s["health_probes"].get<int64_t>(), 0);
  EXPECT_EQ(s["health_failed"], 0) << "/health answers throughout";
  EXPECT_LT(s["health_max_ms"].get<double>(), 2000) << s.dump();
  const Json& slow = r["slowloris"];
  EXPECT_EQ(slow["closed"], 500) << slow.dump();
  EXPECT_EQ(slow["got_408"], 500) << "each is told why";
  EXPECT_EQ(slow["open_at_end"], 0);
  EXPECT_GE(slow["closed_after_s_min"].get<double>(), 1.9) << "not before their 2 s deadline";
  EXPECT_LT(slow["closed_after_s_max"].get<double>(), 12.0) << "and not long after it";
  EXPECT_EQ(slow["request_status"], 200) << "a real request is served meanwhile";
  EXPECT_LT(slow["request_ms"].get<double>(), 5000) << slow.dump();
  const Json& big = r["big_body"];
  EXPECT_EQ(big["status"], 413) << big.dump();
  EXPECT_LT(big["rss_growth_mib"].get<double>(), 64.0) << "the body is not buffered";
  const Json& h = r["hang_ups"];
  EXPECT_EQ(h["running"], 100) << h.dump();
  EXPECT_EQ(h["cancelled"], 100) << "every hung-up request is cancelled";
  EXPECT_GE(h["settled_ms"].get<double>(), 0) << "nothing runs and no page is used afterwards";
  EXPECT_LT(h["settled_ms"].get<double>(), 5000);
  EXPECT_EQ(h["pages_used_after"], 0);
}

std::vector<std::string> ServeArgs() {
  std::vector<std::string> a = {"serve", "-m", testing::TinyModelPath(), "--max-waiting", "4096", "--max-running", "256",
                                "--no-prefix-cache"};
  a.insert(a.end(), kLimits.begin(), kLimits.end());
  return a;
}

TEST(FrontDoor, ServeHoldsThousandsOfStreamsAndShedsHostileClients) {
  const std::string dir = testing::MakeTempDir();
  testing::ServerProcess serve(ServeArgs());
  ASSERT_TRUE(serve.ok()) << serve.Log();
  ExpectFrontDoorHolds(RunBench(serve.port(), serve.port(), dir));
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
}

TEST(FrontDoor, TheRouterHoldsThousandsOfStreamsAndShedsHostileClients) {
  const std::string dir = testing::MakeTempDir();
  testing::ServerProcess serve(ServeArgs());
  ASSERT_TRUE(serve.ok()) << serve.Log();
  std::vector<std::string> args = {"router", "--decode", "127.0.0.1:" + std::to_string(serve.port())};
  args.insert(args.end(), kLimits.begin(), kLimits.end());
  testing::ServerProcess router(args);
  ASSERT_TRUE(router.ok()) << router.Log();
  ExpectFrontDoorHolds(RunBench(router.port(), serve.port(), dir));
  EXPECT_EQ(router.Terminate(), 0) << router.Log();
  EXPECT_EQ(serve.Terminate(), 0) << serve.Log();
}

}  // namespace
}  // namespace tandem
