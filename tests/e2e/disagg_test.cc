// Disaggregated serving as real processes on 127.0.0.1: a prefill engine and
// a decode server connected over UCX, against a colocated server as the
// oracle. Outputs must match bit for bit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include "support/disagg_client.h"
#include "support/http_client.h"
#include "support/paths.h"
#include "support/process.h"
#include "support/server_process.h"
#include "support/tiny_model.h"
#include "support/wait.h"

namespace tandem {
namespace {

using json = nlohmann::json;
using testing::HttpGet;
using testing::HttpPost;
using testing::ServerProcess;

// Every test runs on the tiny llama model (K, V and a derived index-K) and
// on dsa-tiny (deepseek32: the MLA latent and the model's own index-K).
class Disagg : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = &testing::PresetModelPath(GetParam());
    ASSERT_FALSE(model_->empty());
  }
  static std::vector<std::string> Attention(const std::string& dtype) { return testing::SparseArgs(dtype); }
  static std::unique_ptr<ServerProcess> Prefill(const std::string& dtype, std::vector<std::string> extra = {}) {
    return testing::StartPrefill(*model_, dtype, std::move(extra));
  }
  static std::unique_ptr<ServerProcess> Serve(const std::string& dtype, int prefill_port = 0,
                                              std::vector<std::string> extra = {}) {
    return testing::StartServe(*model_, dtype, prefill_port > 0 ? testing::Loopback(prefill_port) : "",
                               std::move(extra));
  }
  static const std::string* model_;
};
const std::string* Disagg::model_ = nullptr;

using testing::Complete;
using testing::Conversation;
using testing::Prompt;

TEST_P(Disagg, SixtyFourConcurrentConversationsMatchColocatedForFp8AndBf16) {
  for (const std::string dtype : {"fp8", "bf16"}) {
    auto prefill = Prefill(dtype);
    ASSERT_TRUE(prefill->ok()) << prefill->Log();
    auto decode = Serve(dtype, prefill->port());
    auto colocated = Serve(dtype);
    ASSERT_TRUE(decode->ok() && colocated->ok()) << decode->Log() << colocated->Log();
    std::vector<std::future<std::vector<std::string>>> disagg;
    for (int i = 0; i < 64; ++i) {
      disagg.push_back(std::async(std::launch::async, [&, i] { return Conversation(decode->port(), i); }));
    }
    std::vector<std::vector<std::string>> got;
    for (auto& f : disagg) got.push_back(f.get());
    // The oracle afterwards, one conversation at a time.
    for (int i = 0; i < 64; ++i) {
      EXPECT_EQ(got[size_t(i)], Conversation(colocated->port(), i)) << dtype << " conversation " << i;
    }
    auto m = testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body);
    EXPECT_EQ(m["tandem_requests_total{outcome=\"finished\"}"], 128);
    EXPECT_EQ(m["tandem_handoffs_total{outcome=\"committed\"}"], 128);
    EXPECT_EQ(m["tandem_handoffs_verified_total"], 128);
    EXPECT_EQ(m["tandem_cache_pages{state=\"reserved\"}"], 0);
    EXPECT_GT(m["tandem_handoff_time_share"], 0);
    EXPECT_LT(m["tandem_handoff_time_share"], 1);
    std::cout << "[ disagg " << dtype << " ] handoff share of request time: " << m["tandem_handoff_time_share"] << "\n";
    // What the handoffs carried, per cache buffer: every token's rows of every
    // buffer, so index-K's share is its row's share (fp8 132 B, bf16 256 B a
    // token and layer; K + V f16 256 B on tiny, the f16 latent 1152 B on dsa-tiny).
    const bool dsa = GetParam() != "tiny";
    const double index_k = m["tandem_handoff_bytes_total{buffer=\"index_k\"}"];
    const double rest = dsa ? m["tandem_handoff_bytes_total{buffer=\"kv_latent\"}"]
                            : m["tandem_handoff_bytes_total{buffer=\"k\"}"] + m["tandem_handoff_bytes_total{buffer=\"v\"}"];
    const double index_row = dtype == "fp8" ? 132 : 256, rest_row = dsa ? 1152 : 256;
    EXPECT_GT(index_k, 0);
    EXPECT_EQ(index_k * rest_row, rest * index_row) << dtype;
    std::cout << "[ disagg " << dtype << " ] index-K share of handoff bytes: " << 100.0 * index_k / (index_k + rest)
              << "%\n";
    for (const char* phase : {"tandem_handoff_page_wait_seconds", "tandem_handoff_prefill_compute_seconds",
                              "tandem_handoff_transfer_seconds", "tandem_handoff_commit_wait_seconds",
                              "tandem_decode_phase_seconds"}) {
      const std::string name = phase;
      EXPECT_EQ(m[name + "_count"], 128) << name;
      std::cout << "[ disagg " << dtype << " ] mean " << name << ": " << 1e3 * m[name + "_sum"] / m[name + "_count"]
                << " ms\n";
    }
    EXPECT_EQ(decode->Terminate(), 0) << decode->Log();
    EXPECT_EQ(prefill->Terminate(), 0) << prefill->Log();
  }
}

// A compact K/V cache moves through the handoff like any registry buffer:
// the disaggregated outputs still match the colocated ones bit for bit, the
// layouts carry the dtype, and one side's f32 against the other's f16 is refused.
TEST_P(Disagg, CompactKvCachesMatchColocatedAndAMismatchIsRefused) {
  for (const std::string kv : {"f16", "bf16"}) {
    auto prefill = Prefill("fp8", {"--kv-dtype", kv});
    ASSERT_TRUE(prefill->ok()) << prefill->Log();
    auto decode = Serve("fp8", prefill->port(), {"--kv-dtype", kv});
    auto colocated = Serve("fp8", 0, {"--kv-dtype", kv});
    ASSERT_TRUE(decode->ok() && colocated->ok()) << decode->Log() << colocated->Log();
    std::vector<std::future<std::vector<std::string>>> disagg;
    for (int i = 0; i < 8; ++i) {
      disagg.push_back(std::async(std::launch::async, [&, i] { return Conversation(decode->port(), i); }));
    }
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(disagg[size_t(i)].get(), Conversation(colocated->port(), i)) << kv << " conversation " << i;
    }
    const auto models = json::parse(HttpGet(decode->port(), "/v1/models").body);
    EXPECT_EQ(models["data"][0]["tandem"]["attention"]["kv_dtype"], kv);
    auto m = testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body);
    EXPECT_EQ(m["tandem_handoffs_verified_total"], 16) << kv;
    EXPECT_EQ(decode->Terminate(), 0) << decode->Log();
    EXPECT_EQ(prefill->Terminate(), 0) << prefill->Log();
  }
  auto prefill = Prefill("fp8", {"--kv-dtype", "f16"});
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = Serve("fp8", prefill->port(), {"--kv-dtype", "f32"});
  ASSERT_TRUE(decode->ok()) << decode->Log();
  int request_status = 0;
  Complete(decode->port(), Prompt(1), 4, &request_status);
  EXPECT_NE(request_status, 200);
  // The first differing registry buffer: llama's K (64 dims), deepseek32's latent (576).
  const std::string want = GetParam() == "tiny" ? "k:f32:256 where the prefill engine has k:f16:128"
                                                : "kv_latent:f32:2304 where the prefill engine has kv_latent:f16:1152";
  EXPECT_NE(decode->Log().find(want), std::string::npos) << decode->Log();
}

TEST_P(Disagg, LayoutMismatchFailsAtConnectWithAClearMessage) {
  auto prefill = Prefill("fp8");
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = Serve("bf16", prefill->port());
  ASSERT_TRUE(decode->ok()) << decode->Log();
  // The Hello exchange happens right after connecting.
  int status = 0;
  testing::WaitUntil([&] { return (status = HttpGet(decode->port(), "/health").status) == 503; },
                     std::chrono::seconds(2));
  // The engine notices at its next step; a request makes sure one happens.
  int request_status = 0;
  Complete(decode->port(), Prompt(1), 4, &request_status);
  EXPECT_NE(request_status, 200);
  EXPECT_EQ(HttpGet(decode->port(), "/health").status, 503);
  EXPECT_NE(decode->Log().find("cache layout mismatch"), std::string::npos) << decode->Log();
  EXPECT_NE(decode->Log().find("index_k:bf16:256 where the prefill engine has index_k:fp8_e4m3+f32scale:132"),
            std::string::npos)
      << decode->Log();
}

// The same layout with another top-k computes other rows past the first
// layer: refused at connect like a layout mismatch, naming both. With no
// prefill engine it can use, the decode server computes prompts itself (its
// default) and says so in /health.
TEST_P(Disagg, AnotherTopKIsRefusedAtConnect) {
  auto prefill = Prefill("bf16");
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = std::make_unique<ServerProcess>(std::vector<std::string>{
      "serve", "-m", *model_, "--attention", "sparse", "--topk", "48", "--index-k-dtype", "bf16", "--prefill",
      testing::Loopback(prefill->port())});
  ASSERT_TRUE(decode->ok()) << decode->Log();
  int request_status = 0;
  Complete(decode->port(), Prompt(1), 4, &request_status);
  EXPECT_EQ(request_status, 200) << "computed on the decode server";
  const auto health = HttpGet(decode->port(), "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_NE(health.body.find("degraded"), std::string::npos) << health.body;
  EXPECT_NE(decode->Log().find("attention=sparse:top_k=48 where the prefill engine has attention=sparse:top_k=32"),
            std::string::npos)
      << decode->Log();
}

// Engines prove a shared cluster key to each other at connect: a prefill
// engine with another key is refused before any destination (and so any
// remote key) reaches it, and the decode side's log says why.
// Over TCP the prefill engine reads the decode's Hello and refuses its proof;
// over UCX a request without the key's knock is rejected before any Hello
// (transfer/ucx.h). Either way both logs say why.
TEST_P(Disagg, APrefillEngineWithAnotherClusterKeyIsRefusedAtConnect) {
  const std::string dir = testing::MakeTempDir();
  std::ofstream(dir + "/a") << "the first cluster's secret\n";
  std::ofstream(dir + "/b") << "the second cluster's secret\n";
  // Each side writes its log line as it acts, which can be a moment after the
  // other side (or the client) has already heard the outcome: wait (bounded).
  auto logs = [](const ServerProcess& p, const std::string& line) {
    return testing::WaitUntil([&] { return p.Log().find(line) != std::string::npos; }, std::chrono::seconds(10));
  };
  auto health = [](int port, int want) {
    return testing::WaitUntil([&] { return HttpGet(port, "/health").status == want; }, std::chrono::seconds(10));
  };
  for (const std::string transport : {"tcp", "auto"}) {
    SCOPED_TRACE(transport);
    const bool ucx = transport != "tcp";
    auto prefill = Prefill("fp8", {"--transport", transport, "--cluster-key-file", dir + "/b"});
    ASSERT_TRUE(prefill->ok()) << prefill->Log();
    auto decode = Serve("fp8", prefill->port(), {"--transport", transport, "--cluster-key-file", dir + "/a"});
    ASSERT_TRUE(decode->ok()) << decode->Log();
    int request_status = 0;
    Complete(decode->port(), Prompt(1), 4, &request_status);
    EXPECT_NE(request_status, 200);
    EXPECT_TRUE(health(decode->port(), 503));
    EXPECT_TRUE(logs(*decode, ucx ? "rejected by remote peer" : "refusing the prefill engine")) << decode->Log();
    EXPECT_TRUE(logs(*decode, "cluster-key-file")) << decode->Log();
    const std::string refused = ucx ? "its connection request does not carry the cluster key's knock"
                                    : "does not hold this engine's cluster key";
    EXPECT_TRUE(logs(*prefill, refused)) << prefill->Log();
    EXPECT_EQ(decode->Terminate(), 0) << decode->Log();
    // No key at all against a keyed prefill engine: refused too.
    auto keyless = Serve("fp8", prefill->port(), {"--transport", transport, "--insecure-no-cluster-key"});
    ASSERT_TRUE(keyless->ok()) << keyless->Log();
    Complete(keyless->port(), Prompt(1), 4, &request_status);
    EXPECT_NE(request_status, 200);
    if (!ucx) EXPECT_TRUE(logs(*prefill, "proves no cluster key")) << prefill->Log();
    EXPECT_EQ(keyless->Terminate(), 0) << keyless->Log();
    // The same key: served, once its link is up.
    auto same = Serve("fp8", prefill->port(), {"--transport", transport, "--cluster-key-file", dir + "/b"});
    ASSERT_TRUE(same->ok()) << same->Log();
    EXPECT_TRUE(health(same->port(), 200)) << same->Log();
    Complete(same->port(), Prompt(1), 4, &request_status);
    EXPECT_EQ(request_status, 200) << same->Log();
    EXPECT_EQ(same->Terminate(), 0) << same->Log();
    EXPECT_EQ(prefill->Terminate(), 0) << prefill->Log();
  }
}

TEST_P(Disagg, PrefillDeathFailsRequestsFastAndHealthTurns503) {
  auto prefill = Prefill("bf16");
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = Serve("bf16", prefill->port());
  ASSERT_TRUE(decode->ok()) << decode->Log();
  int status = 0;
  EXPECT_NE(Complete(decode->port(), Prompt(2), 8, &status).find("HTTP"), 0u);
  EXPECT_EQ(status, 200);
  prefill->Kill9();
  const auto t0 = std::chrono::steady_clock::now();
  const bool refused = testing::WaitUntil(
      [&] {
        Complete(decode->port(), Prompt(3), 8, &status);
        return status == 503;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50));
  EXPECT_TRUE(refused) << "requests must fail with 503 once the prefill engine is gone\n" << decode->Log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  // The engine publishes its health after the step that failed the request:
  // the client may hear the 503 a moment before /health does.
  int health = 0;
  testing::WaitUntil([&] { return (health = HttpGet(decode->port(), "/health").status) == 503; },
                     std::chrono::seconds(5), std::chrono::milliseconds(10));
  if (testing::LinksUp(decode->Log()) > 1) {
    std::cout << "[ note ] another test's prefill engine took the freed port; the decode server connected to it\n";
  } else {
    EXPECT_EQ(health, 503) << decode->Log();
  }
  // The dead peer's close event frees what a handoff caught by the death held (at the engine's next pass).
  bool baseline = false;
  auto m = testing::WaitForBaseline(decode->port(), std::chrono::seconds(5), &baseline);
  EXPECT_EQ(m["tandem_cache_pages{state=\"reserved\"}"], 0) << "nothing left reserved for the dead peer";
}

TEST_P(Disagg, TheOracleCatchesAnUnsafeEarlyCommitAndDigestsRefuseIt) {
  auto colocated = Serve("bf16");
  ASSERT_TRUE(colocated->ok());
  std::vector<std::string> want;
  for (int i = 0; i < 8; ++i) want.push_back(Complete(colocated->port(), Prompt(i + 2), 16));
  const std::vector<std::string> unsafe = {"--debug-unsafe-early-commit", "--debug-put-delay-us", "30000"};
  {
    auto prefill = Prefill("bf16", unsafe);
    ASSERT_TRUE(prefill->ok()) << prefill->Log();
    EXPECT_NE(prefill->Log().find("WARNING: --debug-unsafe-early-commit"), std::string::npos);
    auto decode = Serve("bf16", prefill->port(), {"--verify-handoff", "off"});
    ASSERT_TRUE(decode->ok()) << decode->Log();
    int mismatches = 0;
    for (int i = 0; i < 8; ++i) mismatches += Complete(decode->port(), Prompt(i + 2), 16) != want[size_t(i)];
    EXPECT_GT(mismatches, 0) << "without verification the early commit must corrupt some outputs";
  }
  {
    auto prefill = Prefill("bf16", unsafe);
    auto decode = Serve("bf16", prefill->port(), {"--verify-handoff", "all"});
    ASSERT_TRUE(prefill->ok() && decode->ok());
    int refused = 0;
    for (int i = 0; i < 8; ++i) {
      int status = 0;
      const std::string text = Complete(decode->port(), Prompt(i + 2), 16, &status);
      if (status == 200) {
        EXPECT_EQ(text, want[size_t(i)]) << "a handoff that passed verification must be exact";
      } else {
        ++refused;
        EXPECT_NE(text.find("digest mismatch"), std::string::npos) << text;
      }
    }
    EXPECT_GT(refused, 0);
  }
}

TEST_P(Disagg, BitFlipsAreDetectedAndNeverServed) {
  auto colocated = Serve("fp8");
  auto prefill = Prefill("fp8", {"--debug-bit-flip-rate", "0.05"});
  ASSERT_TRUE(colocated->ok() && prefill->ok()) << prefill->Log();
  auto decode = Serve("fp8", prefill->port(), {"--verify-handoff", "all"});
  ASSERT_TRUE(decode->ok()) << decode->Log();
  int failed = 0;
  for (int i = 0; i < 12; ++i) {
    int status = 0;
    const std::string text = Complete(decode->port(), Prompt(i), 8, &status);
    if (status == 200) {
      EXPECT_EQ(text, Complete(colocated->port(), Prompt(i), 8)) << i;
    } else {
      ++failed;
      EXPECT_NE(text.find("digest mismatch"), std::string::npos) << text;
    }
  }
  // A damaged handoff fails only itself: its request is placed again (here on
  // the same engine, the only one) and fails only if every placement did.
  auto m = testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body);
  EXPECT_GT(m["tandem_handoff_digest_mismatches_total"], 0) << "5% of page writes corrupted: some digests must fail";
  EXPECT_GE(m["tandem_handoff_replacements_total"], m["tandem_handoff_digest_mismatches_total"] - failed);
  EXPECT_EQ(HttpGet(decode->port(), "/health").status, 200) << "a corrupted handoff fails only itself";
}

TEST_P(Disagg, AbortStormLeavesNothingBehindAndACleanRoundSucceeds) {
  // Slow page writes keep handoffs in flight long enough to be cancelled mid-way.
  auto prefill = Prefill("bf16", {"--debug-put-delay-us", "20000"});
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = Serve("bf16", prefill->port());
  ASSERT_TRUE(decode->ok()) << decode->Log();
  const int port = decode->port();
  for (int round = 0; round < 10; ++round) {
    std::vector<std::future<void>> clients;
    for (int i = 0; i < 8; ++i) {
      clients.push_back(std::async(std::launch::async, [&, i] {
        const std::string body =
            json{{"prompt", Prompt(i)}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}}.dump();
        if (i % 2 == 0) {
          testing::HttpPostAndHangUp(port, "/v1/completions", body, 5);  // gone mid-handoff
        } else {
          int status = 0;
          Complete(port, Prompt(i), 8, &status);
          EXPECT_EQ(status, 200);
        }
      }));
    }
    for (auto& c : clients) c.get();
  }
  std::map<std::string, double> m;
  testing::WaitUntil(  // acknowledgements and cancellations settle
      [&] {
        m = testing::ParseMetrics(HttpGet(port, "/metrics").body);
        return m["tandem_requests_running"] + m["tandem_requests_waiting"] == 0 &&
               m["tandem_handoff_quarantined_pages"] == 0 && m["tandem_cache_pages{state=\"reserved\"}"] == 0;
      },
      std::chrono::seconds(30), std::chrono::milliseconds(20));
  EXPECT_EQ(m["tandem_requests_running"] + m["tandem_requests_waiting"], 0);
  EXPECT_EQ(m["tandem_handoff_quarantined_pages"], 0);
  EXPECT_EQ(m["tandem_cache_pages{state=\"reserved\"}"], 0);
  EXPECT_EQ(m["tandem_cache_pages{state=\"used\"}"], m["tandem_prefix_cache_pages"]);
  EXPECT_GT(m["tandem_handoffs_total{outcome=\"aborted\"}"], 0) << "some cancellations hit handoffs in flight";
  EXPECT_EQ(HttpGet(port, "/health").status, 200);
  int ok = 0;
  for (int i = 0; i < 8; ++i) {
    int status = 0;
    Complete(port, Prompt(i + 10), 8, &status);
    ok += status == 200;
  }
  EXPECT_EQ(ok, 8) << "a clean round after the storm succeeds completely";
}

TEST_P(Disagg, DecodeKilledMidHandoffThePrefillEngineReleasesEverything) {
  auto prefill = Prefill("bf16", {"--debug-put-delay-us", "20000"});
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  auto decode = Serve("bf16", prefill->port());
  ASSERT_TRUE(decode->ok()) << decode->Log();
  std::vector<std::future<void>> clients;
  for (int i = 0; i < 6; ++i) {
    clients.push_back(std::async(std::launch::async, [&, i] { Complete(decode->port(), Prompt(i + 5), 8); }));
  }
  EXPECT_TRUE(testing::WaitUntil(  // handoffs in flight when it dies
      [&] { return testing::ParseMetrics(HttpGet(decode->port(), "/metrics").body)["tandem_handoffs_in_flight"] > 0; },
      std::chrono::seconds(5), std::chrono::milliseconds(5)));
  decode->Kill9();
  for (auto& c : clients) c.get();
  // The sender's puts fail or its flush deadline passes; either way it lets go
  // by itself (the engine has no endpoint to ask; its stop line says): a
  // window for that, after which stopping must find nothing held.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(prefill->Terminate(), 0) << prefill->Log();
  const std::string log = prefill->Log();
  EXPECT_NE(log.find(" 0 pages in use,"), std::string::npos) << log;
}

TEST_P(Disagg, TwoPrefillEnginesShareTheWorkAndOneMaySurviveTheOther) {
  auto p1 = Prefill("bf16");
  auto p2 = Prefill("bf16");
  ASSERT_TRUE(p1->ok() && p2->ok()) << p1->Log() << p2->Log();
  std::vector<std::string> args = {"serve", "-m", *model_, "--prefill",
                                   "127.0.0.1:" + std::to_string(p1->port()) + ",127.0.0.1:" + std::to_string(p2->port())};
  for (auto& x : Attention("bf16")) args.push_back(x);
  ServerProcess decode(args);
  auto colocated = Serve("bf16");
  ASSERT_TRUE(decode.ok() && colocated->ok()) << decode.Log();
  std::vector<std::future<std::string>> got;
  for (int i = 0; i < 16; ++i) {
    got.push_back(std::async(std::launch::async, [&, i] { return Complete(decode.port(), Prompt(i), 12); }));
  }
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[size_t(i)].get(), Complete(colocated->port(), Prompt(i), 12)) << i;
  // Both engines took part; then one dies and the other carries on alone.
  p1->Kill9();
  EXPECT_TRUE(testing::WaitUntil(  // the decode server saw its link go down
      [&] { return testing::ParseMetrics(HttpGet(decode.port(), "/metrics").body)["tandem_prefill_links_up"] == 1; },
      std::chrono::seconds(10), std::chrono::milliseconds(20)));
  int ok = 0;
  for (int i = 0; i < 6; ++i) {
    int status = 0;
    const std::string text = Complete(decode.port(), Prompt(i + 20), 8, &status);
    if (status == 200) {
      ++ok;
      EXPECT_EQ(text, Complete(colocated->port(), Prompt(i + 20), 8));
    }
  }
  EXPECT_EQ(ok, 6) << decode.Log();
  EXPECT_EQ(HttpGet(decode.port(), "/health").status, 200) << "one prefill engine is enough";
  EXPECT_EQ(p2->Terminate(), 0);
  const std::string log2 = p2->Log();
  const size_t at = log2.find("stopping (");
  ASSERT_NE(at, std::string::npos) << log2;
  EXPECT_GT(std::atoi(log2.c_str() + at + 10), 6) << "the survivor served its share and the rest: " << log2;
}

int FreePort() {
  // Bind port 0, read the port, close: good enough for a test on loopback.
  ServerProcess probe({"router", "--decode", "127.0.0.1:1"});
  const int port = probe.port();
  probe.Terminate();
  return port;
}

TEST_P(Disagg, ServeDisaggMatchesColocatedAndStopsCleanly) {
  // --ctx-size past the model's 4096 reaches both engines: a 5000-token prompt
  // is prefilled (the prefill engine once refused it with the model's context).
  std::vector<std::string> args = {"serve", "--disagg", "-m", *model_, "--model-id", "tiny", "--ctx-size", "8192"};
  for (auto& x : Attention("bf16")) args.push_back(x);
  ServerProcess disagg(args, 120, "router at http://127.0.0.1:");
  ASSERT_TRUE(disagg.ok()) << disagg.Log();
  auto colocated = Serve("bf16");
  ASSERT_TRUE(colocated->ok());
  std::vector<std::future<std::string>> got;
  for (int i = 0; i < 12; ++i) {
    got.push_back(std::async(std::launch::async, [&, i] { return Complete(disagg.port(), Prompt(i), 20); }));
  }
  for (int i = 0; i < 12; ++i) EXPECT_EQ(got[size_t(i)].get(), Complete(colocated->port(), Prompt(i), 20)) << i;
  std::vector<int32_t> long_prompt(5000);
  for (size_t k = 0; k < long_prompt.size(); ++k) long_prompt[k] = int32_t(3 + (k * 7) % 900);
  int status = 0;
  const std::string long_answer = Complete(disagg.port(), long_prompt, 4, &status);
  EXPECT_EQ(status, 200) << long_answer << disagg.Log();
  EXPECT_EQ(HttpGet(disagg.port(), "/health").status, 200);
  EXPECT_EQ(disagg.Terminate(), 0) << disagg.Log();
  EXPECT_NE(disagg.Log().find(" prefill info  tandem prefill: stopping (13 committed"), std::string::npos) << disagg.Log();
}

TEST_P(Disagg, DecodeKilledRouterAnswers503ThenRecoversAfterRestart) {
  auto prefill = Prefill("bf16");
  ASSERT_TRUE(prefill->ok()) << prefill->Log();
  const int decode_port = FreePort();
  // Decode server on a fixed port, so the router can find it again after a restart.
  auto decode_args = [&] {
    std::vector<std::string> a = {"serve", "-m", *model_, "--prefill", "127.0.0.1:" + std::to_string(prefill->port())};
    for (auto& x : Attention("bf16")) a.push_back(x);
    return a;
  };
  auto decode = std::make_unique<ServerProcess>(decode_args(), 60, "http://127.0.0.1:", decode_port);
  ASSERT_TRUE(decode->ok()) << decode->Log();
  // A short wait for a healthy backend: with none, a moved request is refused soon.
  ServerProcess router({"router", "--decode", "127.0.0.1:" + std::to_string(decode_port), "--move-wait-ms", "500"});
  ASSERT_TRUE(router.ok()) << router.Log();
  int status = 0;
  Complete(router.port(), Prompt(1), 8, &status);
  EXPECT_EQ(status, 200);
  decode->Kill9();
  const auto t0 = std::chrono::steady_clock::now();
  Complete(router.port(), Prompt(2), 8, &status);
  EXPECT_EQ(status, 503) << "the router must notice the dead decode server";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "and answer quickly";
  decode = std::make_unique<ServerProcess>(decode_args(), 60, "http://127.0.0.1:", decode_port);
  ASSERT_TRUE(decode->ok()) << decode->Log();
  const bool recovered = testing::WaitUntil(
      [&] {
        Complete(router.port(), Prompt(3), 8, &status);
        return status == 200;
      },
      std::chrono::seconds(20), std::chrono::milliseconds(50));
  EXPECT_TRUE(recovered) << "requests succeed again once the decode server is back";
}

INSTANTIATE_TEST_SUITE_P(Models, Disagg, testing::kTestModels, testing::ModelInstanceName);

}  // namespace
}  // namespace tandem
