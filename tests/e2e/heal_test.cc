// The handoff heals itself: after each peer fault, with real processes over
// UCX on 127.0.0.1, requests in flight end within the peer timeout (an error,
// or re-placed on a healthy prefill engine), a clean round equals colocated
// `serve`, page accounting returns to baseline on every engine, and nothing
// is restarted except the process the test killed.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <future>
#include <map>
#include <thread>

#include "support/disagg_client.h"
#include "support/http_client.h"
#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"
#include "support/wait.h"

namespace tandem {
namespace {

using json = nlohmann::json;
using testing::Complete;
using testing::HttpGet;
using testing::Loopback;
using testing::Prompt;
using testing::ServerProcess;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// Short liveness so a dead or silent peer is noticed in about a second.
const std::vector<std::string> kFastLiveness = {"--peer-timeout-ms", "1000"};

std::string Tail(const std::string& log, size_t bytes = 6000) {
  return log.size() <= bytes ? log : "..." + log.substr(log.size() - bytes);
}

// Every test runs on the tiny llama model and on dsa-tiny (deepseek32).
class Heal : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = testing::PresetModelPath(GetParam());
    ASSERT_FALSE(model_.empty());
  }
  std::unique_ptr<ServerProcess> Prefill(std::vector<std::string> extra = {}, int port = 0) {
    extra.insert(extra.end(), kFastLiveness.begin(), kFastLiveness.end());
    return testing::StartPrefill(model_, "bf16", extra, port);
  }
  std::unique_ptr<ServerProcess> Decode(const std::string& prefill, std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), kFastLiveness.begin(), kFastLiveness.end());
    return testing::StartServe(model_, "bf16", prefill, extra);
  }
  // The oracle: a colocated server, asked one request at a time.
  std::string Want(int i, int tokens = 8) {
    if (!colocated_) colocated_ = testing::StartServe(model_, "bf16");
    return Complete(colocated_->port(), Prompt(i), tokens);
  }
  // A clean round: `n` requests at once (or one after another), each equal to the oracle.
  void ExpectCleanRound(int port, int first, int n, bool at_once = true) {
    std::vector<std::future<std::string>> got;
    for (int i = first; i < first + n; ++i) {
      got.push_back(std::async(at_once ? std::launch::async : std::launch::deferred,
                               [=] { return Complete(port, Prompt(i), 8); }));
    }
    for (int i = first; i < first + n; ++i) EXPECT_EQ(got[size_t(i - first)].get(), Want(i)) << "request " << i;
  }
  void ExpectBaseline(int port) {
    bool ok = false;
    auto m = testing::WaitForBaseline(port, 10s, &ok);
    EXPECT_TRUE(ok) << "running " << m["tandem_requests_running"] << ", waiting " << m["tandem_requests_waiting"]
                    << ", reserved " << m["tandem_cache_pages{state=\"reserved\"}"] << ", quarantined "
                    << m["tandem_handoff_quarantined_pages"] << ", used " << m["tandem_cache_pages{state=\"used\"}"]
                    << " vs cached " << m["tandem_prefix_cache_pages"];
  }
  // n requests at once (Prompt(0..n-1)); each future gives its HTTP status.
  static std::vector<std::future<int>> Load(int port, int n) {
    std::vector<std::future<int>> load;
    for (int i = 0; i < n; ++i) {
      load.push_back(std::async(std::launch::async, [port, i] {
        int status = 0;
        Complete(port, Prompt(i), 8, &status);
        return status;
      }));
    }
    return load;
  }
  // Waits (bounded) until /health answers `status`; returns how long it took.
  static Clock::duration WaitForHealth(int port, int status, Clock::duration limit) {
    const auto t0 = Clock::now();
    testing::WaitUntil([&] { return HttpGet(port, "/health").status == status; },
                       std::chrono::duration_cast<std::chrono::milliseconds>(limit), 20ms);
    return Clock::now() - t0;
  }
  // The prefill engine's own accounting, from its stop line.
  static void ExpectPrefillIdleAtStop(ServerProcess& prefill) {
    EXPECT_EQ(prefill.Terminate(), 0);
    const std::string log = prefill.Log();
    EXPECT_EQ(testing::NumberAfter(log, "failed, "), 0) << "pages in use at stop:\n" << log;
  }

  std::string model_;
  std::unique_ptr<ServerProcess> colocated_;
};

// Regression: LinkDown was permanent — a restarted prefill engine was never
// used again, and /health stayed 503 until the decode server was restarted.
TEST_P(Heal, ARestartedPrefillEngineIsUsedAgainWithoutRestartingTheDecodeServer) {
  auto prefill = Prefill({"--debug-put-delay-us", "2000"});
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  const int port = prefill->port();
  auto decode = Decode(Loopback(port));
  ASSERT_TRUE(decode->ok()) << decode->Log();
  // Under load: 12 requests in flight when the engine dies.
  auto load = Load(decode->port(), 12);
  // Handoffs in flight when it dies (the assertions below do not depend on it).
  testing::WaitUntil(
      [&] { return testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body)["tandem_handoffs_in_flight"] > 0; },
      5s, 5ms);
  prefill->Kill9();
  const auto killed = Clock::now();
  for (auto& f : load) {
    const int status = f.get();
    EXPECT_TRUE(status == 200 || status == 503) << status;
  }
  EXPECT_LT(Clock::now() - killed, 10s) << "requests in flight end within the peer timeout";
  if (testing::LinksUp(decode->Log()) == 1) {  // (unless a parallel test's engine took the port)
    EXPECT_EQ(HttpGet(decode->port(), "/health").status, 503) << "no prefill engine: health says so";
  }
  prefill = Prefill({}, port);
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  const auto healed = WaitForHealth(decode->port(), 200, 20s);
  EXPECT_LT(healed, 10s) << decode->Log();
  std::cout << "[ heal ] decode healthy again " << std::chrono::duration<double>(healed).count()
            << " s after the prefill engine restarted\n";
  ExpectCleanRound(decode->port(), 20, 8);
  ExpectBaseline(decode->port());
  ExpectPrefillIdleAtStop(*prefill);
}

// Regression: a wedged peer (connected, silent) held requests far past every
// deadline and kept their pages quarantined for as long as it stayed connected.
TEST_P(Heal, AWedgedPrefillEngineEndsRequestsWithinThePeerTimeoutAndReleasesTheQuarantine) {
  // The first message on each connection (its Hello) gets out; nothing after it.
  auto prefill = Prefill({"--debug-wedge-after-messages", "1"});
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  const int port = prefill->port();
  auto decode = Decode(Loopback(port));
  ASSERT_TRUE(decode->ok()) << decode->Log();
  const auto t0 = Clock::now();
  auto load = Load(decode->port(), 6);
  for (auto& f : load) EXPECT_NE(f.get(), 200) << "no commit can come from a wedged engine";
  EXPECT_LT(Clock::now() - t0, 8s) << "each request ends within the peer timeout (plus re-placements), not at 60 s";
  // Health tells the truth: the link is declared dead (it may come back for a
  // moment after each reconnect, whose Hello gets through, and die again).
  EXPECT_LT(WaitForHealth(decode->port(), 503, 5s), 5s);
  // Over shared memory the engine writes into our pages itself: they stay
  // quarantined until it answers a new handshake (it does so only once no
  // handoff of the old connection still runs) — here, right after the reconnect.
  std::map<std::string, double> m;
  testing::WaitUntil(
      [&] {
        m = testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body);
        return m["tandem_handoff_quarantined_pages"] == 0 && m["tandem_cache_pages{state=\"reserved\"}"] == 0;
      },
      5s, 20ms);
  EXPECT_EQ(m["tandem_handoff_quarantined_pages"], 0) << "the fence ended the quarantine";
  EXPECT_EQ(m["tandem_cache_pages{state=\"reserved\"}"], 0);
  EXPECT_GT(m["tandem_prefill_links_declared_dead_total"], 0);
  // The wedged engine is replaced on its port (the one process this test kills).
  prefill->Kill9();
  prefill = Prefill({}, port);
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  EXPECT_LT(WaitForHealth(decode->port(), 200, 20s), 10s);
  ExpectCleanRound(decode->port(), 10, 8);
  ExpectBaseline(decode->port());
  ExpectPrefillIdleAtStop(*prefill);
}

TEST_P(Heal, WithTwoPrefillEnginesAndOneWedgedEveryRequestSucceedsThroughTheOther) {
  auto wedged = Prefill({"--debug-wedge-after-messages", "3"});
  auto good = Prefill();
  ASSERT_TRUE(wedged->ok() && good->ok()) << wedged->Log() << good->Log();
  auto decode = Decode(Loopback(wedged->port()) + "," + Loopback(good->port()));
  ASSERT_TRUE(decode->ok()) << decode->Log();
  std::vector<std::future<std::string>> got;
  for (int i = 0; i < 16; ++i) {
    got.push_back(std::async(std::launch::async, [&, i] { return Complete(decode->port(), Prompt(i), 8); }));
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[size_t(i)].get(), Want(i)) << "request " << i << "\n" << decode->Log();
  EXPECT_EQ(HttpGet(decode->port(), "/health").status, 200) << "one prefill engine is enough";
  ExpectCleanRound(decode->port(), 30, 8);
  ExpectBaseline(decode->port());
  EXPECT_NE(decode->Log().find("placing its request again"), std::string::npos) << decode->Log();
  ExpectPrefillIdleAtStop(*good);
}

TEST_P(Heal, ADecodeServerKilledAndRestartedIsServedAgainThroughTheRouter) {
  auto prefill = Prefill({"--debug-put-delay-us", "2000"});
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = Decode(Loopback(prefill->port()));
  ASSERT_TRUE(decode->ok()) << decode->Log();
  const int decode_port = decode->port();
  ServerProcess router({"router", "--decode", Loopback(decode_port)});
  ASSERT_TRUE(router.ok()) << router.Log();
  std::vector<std::future<void>> load;
  for (int i = 0; i < 6; ++i) load.push_back(std::async(std::launch::async, [&, i] { Complete(router.port(), Prompt(i), 8); }));
  // Handoffs in flight when it dies (nothing below depends on it).
  testing::WaitUntil(
      [&] { return testing::ParseMetrics(HttpGet(decode_port, "/metrics").body)["tandem_handoffs_in_flight"] > 0; },
      5s, 5ms);
  decode->Kill9();
  for (auto& f : load) f.get();
  decode = testing::StartServe(model_, "bf16", Loopback(prefill->port()), kFastLiveness, decode_port);
  ASSERT_TRUE(decode->ok()) << decode->Log();
  EXPECT_LT(WaitForHealth(router.port(), 200, 20s), 10s) << router.Log() << decode->Log() << prefill->Log();
  ExpectCleanRound(router.port(), 40, 8);
  ExpectBaseline(decode->port());
  // The prefill engine let go of the dead decode server's connection and work.
  ExpectPrefillIdleAtStop(*prefill);
  EXPECT_NE(prefill->Log().find("stopping ("), std::string::npos);
}

TEST_P(Heal, AnAbortStormOfSixtyFourRequestsForTwentyRoundsLeavesNothingBehind) {
  auto prefill = Prefill({"--debug-put-delay-us", "5000"});
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = Decode(Loopback(prefill->port()));
  ASSERT_TRUE(decode->ok()) << decode->Log();
  const int port = decode->port();
  int served = 0;
  std::map<std::string, int> refused;  // what the clients that stayed got instead of 200
  for (int round = 0; round < 20; ++round) {
    std::vector<std::future<std::pair<int, std::string>>> clients;
    for (int i = 0; i < 64; ++i) {
      clients.push_back(std::async(std::launch::async, [&, i] {
        const std::string body =
            json{{"prompt", Prompt(i % 16)}, {"max_tokens", 4}, {"temperature", 0}, {"stream", true}}.dump();
        if (i % 2 == 0) {
          testing::HttpPostAndHangUp(port, "/v1/completions", body, 5 + (i % 7) * 3);  // gone mid-handoff
          return std::pair<int, std::string>{0, ""};
        }
        int status = 0;
        std::string text = Complete(port, Prompt(i % 16), 4, &status);
        return std::pair<int, std::string>{status, std::move(text)};
      }));
    }
    for (auto& c : clients) {
      auto [status, text] = c.get();
      served += status == 200;
      if (status != 200 && status != 0) ++refused[text.substr(0, 200)];
    }
  }
  std::string why;
  for (const auto& [text, n] : refused) why += std::to_string(n) + "x " + text + "\n";
  EXPECT_EQ(served, 20 * 32) << "every client that stayed was served; the others got:\n" << why << Tail(decode->Log());
  ExpectBaseline(port);
  auto m = testing::ParseMetrics(HttpGet(port, "/metrics").body);
  EXPECT_GT(m["tandem_handoffs_total{outcome=\"aborted\"}"], 0) << "some hang-ups hit handoffs in flight";
  std::cout << "[ heal ] abort storm: " << m["tandem_handoffs_total{outcome=\"aborted\"}"] << " handoffs aborted, "
            << m["tandem_handoffs_total{outcome=\"committed\"}"] << " committed\n";
  EXPECT_EQ(HttpGet(port, "/health").status, 200);
  ExpectCleanRound(port, 50, 8);
  ExpectPrefillIdleAtStop(*prefill);
}

// Page writes slower than the handoff deadline: the decode side aborts, and
// must not reuse those pages until the slow sender has flushed (AbortAck) or
// its connection is closed. Verification on: a late write into a reused page
// would be a digest mismatch, or an answer unequal to the oracle.
TEST_P(Heal, PutsSlowerThanTheHandoffDeadlineNeverLandInAReusedPage) {
  auto slow = Prefill({"--debug-put-delay-us", "1500000"});
  auto fast = Prefill();
  ASSERT_TRUE(slow->ok() && fast->ok());
  auto decode = Decode(Loopback(slow->port()) + "," + Loopback(fast->port()),
                       {"--handoff-timeout-ms", "1000", "--verify-handoff", "all", "--cache-tokens", "2048"});
  ASSERT_TRUE(decode->ok()) << decode->Log();
  std::vector<std::future<std::string>> got;
  for (int i = 0; i < 16; ++i) {
    got.push_back(std::async(std::launch::async, [&, i] { return Complete(decode->port(), Prompt(i % 12), 8); }));
  }
  int served = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string text = got[size_t(i)].get();
    if (text.rfind("HTTP 504", 0) == 0) {
      // Out of time on every engine it was placed on: a clear error, never a wrong answer.
      EXPECT_NE(text.find("deadline"), std::string::npos) << text;
      continue;
    }
    if (text.rfind("HTTP 503", 0) == 0) {
      // The slow engine's link closed under it (an abort not acknowledged in
      // time, under a loaded machine): also a clear error, never a wrong answer.
      EXPECT_NE(text.find("unavailable"), std::string::npos) << text;
      continue;
    }
    ++served;
    EXPECT_EQ(text, Want(i % 12)) << "request " << i;
  }
  EXPECT_GT(served, 0) << "re-placed on the fast engine, requests are served";
  auto m = testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body);
  EXPECT_GT(m["tandem_handoffs_total{outcome=\"aborted\"}"], 0) << "the slow engine's handoffs passed their deadline";
  EXPECT_EQ(m["tandem_handoff_digest_mismatches_total"], 0) << "no late write landed in a reused page";
  slow->Kill9();  // the fault ends; the clean round runs on the other engine
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body)["tandem_prefill_links_up"] == 1; },
      10s, 20ms))
      << "the dead engine's link went down";
  // One at a time and short prompts: this server's 1 s handoff deadline is
  // tight for long prompts or a queue of eight on a slow (sanitized) build.
  ExpectCleanRound(decode->port(), 0, 8, /*at_once=*/false);
  ExpectBaseline(decode->port());
  ExpectPrefillIdleAtStop(*fast);
}

// Regression: a prefill engine on the f16 file and a decode server on the
// q8_0 file of the same model connected (health 200) and served answers.
TEST_P(Heal, WeightsThatDifferAreRefusedAtConnectOnBothSides) {
  const std::string dir = testing::MakeTempDir();
  for (const std::string type : {"f16", "q8_0"}) {
    auto mk = testing::RunTandem("mkmodel --preset " + GetParam() + " --type " + type + " --out " + dir + "/" + type + ".gguf");
    ASSERT_EQ(mk.exit_code, 0) << mk.output;
  }
  auto prefill = testing::StartPrefill(dir + "/f16.gguf", "bf16", kFastLiveness);
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = testing::StartServe(dir + "/q8_0.gguf", "bf16", Loopback(prefill->port()), kFastLiveness);
  ASSERT_TRUE(decode->ok()) << decode->Log();
  EXPECT_EQ(HttpGet(decode->port(), "/health").status, 503);
  int status = 0;
  Complete(decode->port(), Prompt(1), 4, &status);
  EXPECT_EQ(status, 503);
  EXPECT_NE(decode->Log().find("model weights mismatch"), std::string::npos) << decode->Log();
  // Refused at the listener's gate, before the engine spends anything on it.
  EXPECT_NE(prefill->Log().find("refused an unauthenticated connection: its first message was refused: model weights "
                                "mismatch"),
            std::string::npos)
      << prefill->Log();
}

// With TCP carrying every byte (no shared memory), 32 concurrent two-turn
// conversations equal colocated.
TEST_P(Heal, OverTheTcpTransportThirtyTwoConversationsMatchColocated) {
  const std::vector<std::string> tcp = {"--transport", "tcp"};
  auto prefill = Prefill(tcp);
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = Decode(Loopback(prefill->port()), tcp);
  ASSERT_TRUE(decode->ok()) << decode->Log();
  auto colocated = testing::StartServe(model_, "bf16");
  std::vector<std::future<std::vector<std::string>>> got;
  for (int i = 0; i < 32; ++i) {
    got.push_back(std::async(std::launch::async, [&, i] { return testing::Conversation(decode->port(), i); }));
  }
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[size_t(i)].get(), testing::Conversation(colocated->port(), i)) << i;
  auto m = testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body);
  EXPECT_EQ(m["tandem_handoffs_total{outcome=\"committed\"}"], 64);
  ExpectBaseline(decode->port());
  EXPECT_EQ(decode->Terminate(), 0);
  ExpectPrefillIdleAtStop(*prefill);
  EXPECT_EQ(prefill->Log().find("error during flush"), std::string::npos) << prefill->Log();
}

INSTANTIATE_TEST_SUITE_P(Models, Heal, testing::kTestModels, testing::ModelInstanceName);

}  // namespace
}  // namespace tandem
