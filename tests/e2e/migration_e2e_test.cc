// A client never sees a server fault, with real processes: `serve --disagg
// --decode-servers 2` (two decode servers sharing a prefill engine, behind the
// router); eight long streams; a decode server killed -9, or drained, while
// they run: every stream ends whole, and each equals the same request asked
// of a colocated `serve`. And with the only prefill engine down, prompts are
// computed on the decode servers (exact), their /health says degraded, and
// handoffs resume when the engine is back.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>

#include <atomic>
#include <future>
#include <thread>
#include <regex>

#include "loadgen/stream_client.h"
#include "support/http_client.h"
#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"
#include "support/wait.h"

namespace tandem {
namespace {

using json = nlohmann::json;
using testing::ServerProcess;

constexpr int kStreams = 8;

pid_t ChildPid(const ServerProcess& launcher, const std::string& name) {
  const std::string log = launcher.Log();
  const std::string key = "tandem serve --disagg: " + name + " started (pid ";
  const size_t at = log.rfind(key);
  return at == std::string::npos ? -1 : pid_t(std::atol(log.c_str() + at + key.size()));
}

// The launcher's "(decode 127.0.0.1:A,127.0.0.1:B, ..." ports.
std::vector<int> DecodePorts(const ServerProcess& launcher) {
  const std::string log = launcher.Log();
  const std::string key = "(decode ";
  const size_t at = log.find(key);
  std::vector<int> ports;
  if (at == std::string::npos) return ports;
  const std::string list = log.substr(at + key.size(), log.find(' ', at + key.size()) - at - key.size());
  static const std::regex port(R"(:([0-9]+))");
  for (std::sregex_iterator it(list.begin(), list.end(), port), end; it != end; ++it) ports.push_back(std::stoi((*it)[1]));
  return ports;
}

json Body(int i) {
  return {{"model", "tiny"},
          {"messages", {{{"role", "user"}, {"content", "Story number " + std::to_string(i)}}}},
          {"max_tokens", 400},
          {"ignore_eos", true},
          {"temperature", 0.8},
          {"seed", 1000 + i},
          {"stream", true},
          {"stream_options", {{"include_usage", true}}}};
}

std::string Normalized(std::string s) {
  static const std::regex id(R"("id":"chatcmpl-[0-9]+")"), created(R"("created":[0-9]+)"),
      cached(R"("cached_tokens":[0-9]+)");
  s = std::regex_replace(s, id, R"("id":"X")");
  s = std::regex_replace(s, created, R"("created":0)");
  return std::regex_replace(s, cached, R"("cached_tokens":0)");
}

std::string Ask(int port, int i, std::atomic<int>* started = nullptr) {
  std::string out;
  bool counted = false;
  const int status = testing::HttpPostStream(port, "/v1/chat/completions", Body(i).dump(), [&](const std::string& d) {
    out += d;
    if (started && !counted) counted = true, ++*started;
    return true;
  });
  return status == 200 ? Normalized(out) : "HTTP " + std::to_string(status) + ": " + out;
}

double Metric(int port, const std::string& name) {
  return testing::ParseMetrics(testing::HttpGet(port, "/metrics").body)[name];
}

class StreamsThatMove : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string& model = testing::TinyModelPath();
    ASSERT_FALSE(model.empty());
    colocated_ = new ServerProcess({"serve", "-m", model, "--model-id", "tiny"});
    ASSERT_TRUE(colocated_->ok()) << colocated_->Log();
    for (int i = 0; i < kStreams; ++i) reference_.push_back(Ask(colocated_->port(), i));
    for (const std::string& r : reference_) ASSERT_NE(r.find("data: [DONE]"), std::string::npos) << r;
  }
  static void TearDownTestSuite() {
    delete colocated_;
    colocated_ = nullptr;
    reference_.clear();
  }
  static std::unique_ptr<ServerProcess> Launch(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"serve", "--disagg", "-m", testing::TinyModelPath(), "--model-id", "tiny",
                                     "--decode-servers", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<ServerProcess>(args, 120, "router at http://127.0.0.1:");
  }

  // Eight streams through `port`; `fault` runs once every stream has begun.
  void ExpectEveryStreamWhole(int port, const std::function<void()>& fault) {
    std::atomic<int> started{0};
    std::vector<std::future<std::string>> streams;
    for (int i = 0; i < kStreams; ++i) {
      streams.push_back(std::async(std::launch::async, [port, i, &started] { return Ask(port, i, &started); }));
    }
    ASSERT_TRUE(testing::WaitUntil([&] { return started.load() == kStreams; }, std::chrono::seconds(60)));
    fault();
    for (int i = 0; i < kStreams; ++i) {
      const std::string got = streams[size_t(i)].get();
      EXPECT_EQ(got, reference_[size_t(i)]) << "stream " << i;
    }
  }

  static ServerProcess* colocated_;
  static std::vector<std::string> reference_;
};
ServerProcess* StreamsThatMove::colocated_ = nullptr;
std::vector<std::string> StreamsThatMove::reference_;

TEST_F(StreamsThatMove, ADecodeServerKilledMidStreamCostsNoStream) {
  auto launcher = Launch();
  ASSERT_TRUE(launcher->ok()) << launcher->Log();
  const pid_t victim = ChildPid(*launcher, "decode");
  ASSERT_GT(victim, 0) << launcher->Log();
  ExpectEveryStreamWhole(launcher->port(), [&] { ASSERT_EQ(kill(victim, SIGKILL), 0); });
  EXPECT_GE(Metric(launcher->port(), "tandem_router_moves_total"), 1) << "the kill hit no stream";
  EXPECT_EQ(Metric(launcher->port(), "tandem_router_moves_exhausted_total"), 0);
  EXPECT_TRUE(testing::WaitUntil([&] { return ChildPid(*launcher, "decode") != victim; }, std::chrono::seconds(30)))
      << "the killed decode server was not restarted";
}

// A decode server stopped (SIGSTOP) for 30 s while the streams run on it,
// as a wedged host would be: it answers nothing, not even /health. The
// router hears nothing from it for --silence-timeout-ms (2 s) and moves its
// streams to the other server, resumed bit for bit, so every stream ends
// whole before the stopped server runs again, and requests that arrive
// meanwhile are answered too (issue 41: they all waited for it to wake).
TEST_F(StreamsThatMove, ADecodeServerStoppedMidStreamIsLeftBehindBitForBit) {
  auto launcher = Launch({"--silence-timeout-ms", "2000"});
  ASSERT_TRUE(launcher->ok()) << launcher->Log();
  const pid_t victim = ChildPid(*launcher, "decode");
  ASSERT_GT(victim, 0) << launcher->Log();
  std::atomic<bool> continued{false};
  std::thread wake;
  ExpectEveryStreamWhole(launcher->port(), [&] {
    ASSERT_EQ(kill(victim, SIGSTOP), 0);
    wake = std::thread([&] {  // 30 s, or at once when the test is done with it
      testing::WaitUntil([&] { return continued.load(); }, std::chrono::seconds(30));
      continued = true;
      kill(victim, SIGCONT);
    });
  });
  // New requests while it is still stopped: placed where they are answered.
  const bool still_stopped = !continued.load();
  EXPECT_TRUE(still_stopped) << "the streams waited for the stopped server to wake";
  EXPECT_EQ(Ask(launcher->port(), 3), reference_[3]);
  EXPECT_EQ(Ask(launcher->port(), 5), reference_[5]);
  EXPECT_TRUE(still_stopped && !continued.load()) << "the new requests waited for the stopped server to wake";
  continued = true;
  if (wake.joinable()) wake.join();
  EXPECT_GE(Metric(launcher->port(), "tandem_router_moves_by_reason_total{reason=\"silent\"}"), 1)
      << "the stop hit no stream";
  EXPECT_EQ(Metric(launcher->port(), "tandem_router_moves_exhausted_total"), 0);
  // Awake again, it serves.
  EXPECT_TRUE(testing::WaitUntil([&] { return testing::HttpGet(launcher->port(), "/health").status == 200; },
                                 std::chrono::seconds(30)));
  EXPECT_EQ(Ask(launcher->port(), 6), reference_[6]);
}

TEST_F(StreamsThatMove, ADrainedDecodeServerHandsItsStreamsOnAndIsRestarted) {
  // A short drain deadline: what it cannot finish in 0.3 s is moved, not lost.
  auto launcher = Launch({"--shutdown-timeout", "0.3"});
  ASSERT_TRUE(launcher->ok()) << launcher->Log();
  const std::vector<int> decode = DecodePorts(*launcher);
  ASSERT_EQ(decode.size(), 2u) << launcher->Log();
  const pid_t drained = ChildPid(*launcher, "decode");
  ASSERT_GT(drained, 0);
  std::string health;
  ExpectEveryStreamWhole(launcher->port(), [&] {
    ASSERT_EQ(kill(drained, SIGTERM), 0);
    testing::WaitUntil([&] { return (health = testing::HttpGet(decode[0], "/health").body).find("draining") != std::string::npos; },
                       std::chrono::seconds(2), std::chrono::milliseconds(1));
  });
  EXPECT_NE(health.find("draining"), std::string::npos) << health;
  EXPECT_GE(Metric(launcher->port(), "tandem_router_moves_total"), 1) << "the drain moved no stream";
  EXPECT_TRUE(testing::WaitUntil([&] { return ChildPid(*launcher, "decode") != drained; }, std::chrono::seconds(30)));
  // Back on its port, and serving.
  EXPECT_TRUE(testing::WaitUntil([&] { return testing::HttpGet(decode[0], "/health").status == 200; },
                                 std::chrono::seconds(30)));
  EXPECT_EQ(Ask(decode[0], 0), reference_[0]);
}

// The router itself killed mid-stream: a client that traces its stream
// (bench agentic's) asks the restarted router to continue each stream from
// what it has, and gets the uninterrupted answer; the router drained (SIGTERM)
// the same.
TEST_F(StreamsThatMove, StreamsOutliveTheRouterForAClientThatResumes) {
  auto launcher = Launch({"--debug-fault-control", "--shutdown-timeout", "0.2"});
  ASSERT_TRUE(launcher->ok()) << launcher->Log();
  const testing::FaultControl fault_control = testing::FindFaultControl(launcher->Log());
  const int control = fault_control.port;
  ASSERT_GT(control, 0) << launcher->Log();
  ASSERT_FALSE(fault_control.key.empty()) << launcher->Log();
  // The reference texts, through the same client without any fault.
  std::vector<std::string> want;
  for (int i = 0; i < kStreams; ++i) {
    StreamTiming t = StreamChat("127.0.0.1", colocated_->port(), Body(i), 120);
    ASSERT_TRUE(t.error.empty()) << t.error;
    want.push_back(t.text);
  }
  for (const std::string action : {"kill", "drain"}) {
    std::vector<std::future<StreamTiming>> streams;
    for (int i = 0; i < kStreams; ++i) {
      streams.push_back(std::async(std::launch::async, [&, i] {
        return StreamChat("127.0.0.1", launcher->port(), Body(i), 120, /*resume_within_s=*/30);
      }));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the streams are under way (a window the fault may hit)
    ASSERT_EQ(testing::HttpPost(control, "/debug/router/0", json{{"action", action}}.dump(), "application/json", fault_control.key).status, 200) << action;
    if (action == std::string("kill")) {
      ASSERT_EQ(testing::HttpPost(control, "/debug/router/0", R"({"action":"restart"})", "application/json", fault_control.key).status, 200);
    }
    int resumed = 0;
    for (int i = 0; i < kStreams; ++i) {
      const StreamTiming t = streams[size_t(i)].get();
      EXPECT_EQ(t.error, "") << action << ", stream " << i;
      EXPECT_EQ(t.text, want[size_t(i)]) << action << ", stream " << i;
      EXPECT_EQ(t.completion_tokens, 400) << action << ", stream " << i;
      resumed += t.resumes > 0;
    }
    std::cout << "[ router " << action << " ] " << resumed << " of " << kStreams << " streams resumed\n";
  }
}

TEST_F(StreamsThatMove, WithTheOnlyPrefillEngineDownPromptsAreComputedOnTheDecodeServers) {
  auto launcher = Launch({"--debug-fault-control", "--peer-timeout-ms", "500"});
  ASSERT_TRUE(launcher->ok()) << launcher->Log();
  const testing::FaultControl fault_control = testing::FindFaultControl(launcher->Log());
  const int control = fault_control.port;
  ASSERT_GT(control, 0) << launcher->Log();
  ASSERT_FALSE(fault_control.key.empty()) << launcher->Log();
  const std::vector<int> decode = DecodePorts(*launcher);
  ASSERT_EQ(decode.size(), 2u) << launcher->Log();
  EXPECT_EQ(Ask(launcher->port(), 1), reference_[1]);
  const double committed = Metric(decode[0], "tandem_handoffs_total{outcome=\"committed\"}") +
                           Metric(decode[1], "tandem_handoffs_total{outcome=\"committed\"}");
  EXPECT_GE(committed, 1) << "served by the prefill engine while it was up";
  // Fault control takes only its own key (invariant 10): none, another or a
  // web page's request kills nothing.
  EXPECT_EQ(testing::HttpPost(control, "/debug/prefill/0", R"({"action":"kill"})").status, 401);
  EXPECT_EQ(testing::HttpPost(control, "/debug/prefill/0", R"({"action":"kill"})", "application/json",
                              fault_control.key + "0").status,
            401);
  ASSERT_EQ(testing::HttpPost(control, "/debug/prefill/0", R"({"action":"kill"})", "application/json", fault_control.key).status, 200);
  for (int port : decode) {
    std::string body;
    EXPECT_TRUE(testing::WaitUntil([&] { return (body = testing::HttpGet(port, "/health").body).find("degraded") != std::string::npos; },
                                   std::chrono::seconds(10)))
        << body;
  }
  EXPECT_EQ(testing::HttpGet(launcher->port(), "/health").status, 200) << "the deployment still serves";
  for (int i = 0; i < kStreams; ++i) EXPECT_EQ(Ask(launcher->port(), i), reference_[size_t(i)]) << "stream " << i;
  EXPECT_GE(Metric(decode[0], "tandem_local_prefills_total{reason=\"no_prefill_engine\"}") +
                Metric(decode[1], "tandem_local_prefills_total{reason=\"no_prefill_engine\"}"),
            double(kStreams));
  ASSERT_EQ(testing::HttpPost(control, "/debug/prefill/0", R"({"action":"restart"})", "application/json", fault_control.key).status, 200);
  for (int port : decode) {
    EXPECT_TRUE(testing::WaitUntil([&] { return testing::HttpGet(port, "/health").body.find("\"ok\"") != std::string::npos; },
                                   std::chrono::seconds(30)));
  }
  EXPECT_EQ(Ask(launcher->port(), 2), reference_[2]);
  EXPECT_GT(Metric(decode[0], "tandem_handoffs_total{outcome=\"committed\"}") +
                Metric(decode[1], "tandem_handoffs_total{outcome=\"committed\"}"),
            committed)
      << "remote prefill again once the engine is back";
}

}  // namespace
}  // namespace tandem
