// `tandem bench agentic` and `tandem verify` against real `serve --disagg`
// processes on 127.0.0.1: a clean sweep up to 64 sessions, an unsafe early
// commit with delayed writes caught as corruption, and a wedged server that
// stops the sweep instead of filling the report with timeouts.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "model/numerics.h"
#include "support/http_client.h"
#include "support/process.h"
#include "support/wait.h"
#include "support/server_process.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

using json = nlohmann::json;
using testing::RunTandem;
using testing::ServerProcess;

// The model the current test runs on (Agentic's parameter).
const std::string* g_model = nullptr;
const std::string& Model() { return *g_model; }

// Every test runs on the tiny llama model and on dsa-tiny (deepseek32).
class Agentic : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    g_model = &testing::PresetModelPath(GetParam());
    ASSERT_FALSE(g_model->empty());
  }
};

std::unique_ptr<ServerProcess> Disagg(std::vector<std::string> extra) {
  std::vector<std::string> args = {"serve",      "--disagg", "-m",    Model(), "--attention",
                                   "sparse",     "--topk",   "32",    "--index-k-dtype",        "bf16"};
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<ServerProcess>(args, 120, "router at http://127.0.0.1:");
}

json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str(), nullptr, false);
}

std::string Bench(int port, const std::string& dir, const std::string& extra) {
  return "bench agentic --quiet --url 127.0.0.1:" + std::to_string(port) + " -m " + Model() +
         " --preset small --out-dir " + dir + " " + extra;
}

int64_t Outcome(const json& point, const char* o) { return point["outcomes"][o].get<int64_t>(); }

// The identity an older build (numerics version one lower) would have reported.
json OlderBuild(const json& numerics) {
  auto n = NumericsIdentity::FromJson(numerics);
  EXPECT_TRUE(n.ok()) << numerics.dump();
  NumericsIdentity older = n.ok() ? *n : NumericsIdentity{};
  older.version -= 1;
  return older.ToJson();
}

// The soak: two prefill engines behind the decode server, every kind of
// fault once (a prefill engine killed and restarted, the other stopped past
// the peer timeout and continued, an abort storm, bit flips in one engine's
// page writes), sessions running throughout on poisoned pages. Nothing is
// corrupt, every failed round lies in a fault's window, every quiet period is
// clean, and nothing the schedule did not kill was restarted.
TEST_P(Agentic, ASoakThroughEveryKindOfFaultStaysExactAndItsQuietPeriodsClean) {
  auto server = Disagg({"--prefill-engines", "2", "--debug-fault-control", "--peer-timeout-ms", "1000",
                        "--debug-poison-pages"});
  ASSERT_TRUE(server->ok()) << server->Log();
  const testing::FaultControl fault_control = testing::FindFaultControl(server->Log());
  ASSERT_GT(fault_control.port, 0) << server->Log();
  const int control = fault_control.port;
  const std::string dir = testing::MakeTempDir();
  auto r = RunTandem(Bench(server->port(), dir,
                           "--sweep 8 --rounds 2 --initial-tokens 384 --gen-tokens 16 --soak 30 --fault-settle 5 "
                           "--faults kill:0@4+2,wedge:1@11+3,abort-storm:16@18,bit-flips:0@22+4/0.2 "
                           "--fault-control 127.0.0.1:" + std::to_string(control) + " --fault-control-key-file " +
                               fault_control.key_file),
                     600);
  ASSERT_EQ(r.exit_code, 0) << r.output << server->Log();
  const json report = ReadJson(dir + "/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_TRUE(report["verified"].get<bool>());
  EXPECT_TRUE(report["stopped"].is_null()) << r.output;
  const json& soak = report["soak"];
  EXPECT_TRUE(soak["restarted"].empty()) << soak.dump();
  int faults = 0;
  for (const auto& w : soak["windows"]) {
    if (w["kind"] == "fault") {
      ++faults;
      EXPECT_EQ(w["label"].get<std::string>().find("FAILED"), std::string::npos) << w.dump();
    } else {
      EXPECT_EQ(w["outcomes"]["timeout"].get<int64_t>() + w["outcomes"]["error"].get<int64_t>(), 0) << w.dump();
    }
    EXPECT_EQ(w["outcomes"]["corrupt"].get<int64_t>(), 0) << w.dump();
  }
  EXPECT_EQ(faults, 4) << soak.dump();
  const json& point = report["points"][0];
  EXPECT_EQ(Outcome(point, "corrupt"), 0);
  EXPECT_GT(Outcome(point, "ok"), 40) << point.dump();
  EXPECT_NE(r.output.find("soak: 30 s at 8 sessions"), std::string::npos) << r.output;
  // The fault control refuses what it cannot do, with the reason, and stays up.
  const std::string& key = fault_control.key;
  const auto bad_json = testing::HttpPost(control, "/debug/prefill/0", "{not json", "application/json", key);
  EXPECT_EQ(bad_json.status, 400) << bad_json.body;
  const auto unknown = testing::HttpPost(control, "/debug/prefill/0", R"({"action":"explode"})", "application/json", key);
  EXPECT_EQ(unknown.status, 400);
  EXPECT_NE(unknown.body.find("unknown action"), std::string::npos) << unknown.body;
  EXPECT_EQ(testing::HttpPost(control, "/debug/prefill/7", R"({"action":"kill"})", "application/json", key).status, 404);
  EXPECT_EQ(testing::HttpPost(control, "/debug/prefill/0", R"({"action":"restart","bit_flip_rate":2})",
                              "application/json", key)
                .status,
            400);
  // Only with its key, and never from a web page (invariant 10).
  EXPECT_EQ(testing::HttpPost(control, "/debug/prefill/0", R"({"action":"stop"})").status, 401);
  httplib::Client page("127.0.0.1", control);
  const auto from_page = page.Post("/debug/prefill/0", {{"Origin", "https://evil.example"}, {"Authorization", "Bearer " + key}},
                                   R"({"action":"stop"})", "application/json");
  ASSERT_TRUE(from_page);
  EXPECT_EQ(from_page->status, 403);
  EXPECT_EQ(testing::HttpGet(server->port(), "/health").status, 200);
}

// With every freed or reserved page poisoned on both engines: a correct
// handoff never reads a page before its data landed, so poisoning changes nothing.
TEST_P(Agentic, SweepToSixtyFourSessionsOnDisaggBf16SparseIsClean) {
  auto server = Disagg({"--debug-poison-pages"});
  ASSERT_TRUE(server->ok()) << server->Log();
  const std::string dir = testing::MakeTempDir();
  // A shorter shape than the preset keeps 64 sessions inside the decode cache and the test quick.
  auto r = RunTandem(Bench(server->port(), dir, "--sweep 16,64 --rounds 2 --initial-tokens 384 --gen-tokens 24"), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json report = ReadJson(dir + "/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_TRUE(report["verified"].get<bool>());
  EXPECT_TRUE(report["stopped"].is_null());
  EXPECT_EQ(report["server_attention"]["index_k_dtype"], "bf16");
  ASSERT_EQ(report["points"].size(), 2u);
  EXPECT_EQ(report["points"][1]["concurrency"], 64);
  for (const auto& p : report["points"]) {
    const int64_t rounds = p["rounds"].get<int64_t>();
    EXPECT_EQ(rounds, 2 * p["concurrency"].get<int64_t>());
    EXPECT_EQ(Outcome(p, "ok"), rounds) << p.dump();
    EXPECT_EQ(Outcome(p, "corrupt"), 0);
    EXPECT_EQ(Outcome(p, "timeout"), 0);
    EXPECT_EQ(Outcome(p, "error"), 0);
    // Round 2 re-sends round 1's conversation: the decode side's prefix cache serves most of it.
    EXPECT_GT(p["later_round_hit_rate"].get<double>(), 0.5) << p.dump();
    // The decode server's handoff counters give each point its own share.
    ASSERT_TRUE(p["handoff_time_share"].is_number()) << p.dump();
    EXPECT_GT(p["handoff_time_share"].get<double>(), 0.0);
    EXPECT_LT(p["handoff_time_share"].get<double>(), 1.0);
  }
  EXPECT_NE(r.output.find("every answer verified"), std::string::npos) << r.output;
  // `tandem verify` on the saved transcript agrees.
  auto v = RunTandem("verify " + dir + "/transcript.jsonl -m " + Model(), 300);
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("160 rounds: 160 ok, 0 drift, 0 corrupt, 0 timeout, 0 error"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("judged exactly, bit for bit"), std::string::npos) << v.output;
  // The differential oracle on the same clean transcript: nothing corrupt.
  ServerProcess reference({"serve", "-m", Model(), "--attention", "sparse", "--topk", "32",
                           "--index-k-dtype", "bf16"});
  ASSERT_TRUE(reference.ok()) << reference.Log();
  auto d = RunTandem("verify --reference-url 127.0.0.1:" + std::to_string(reference.port()) + " " + dir +
                         "/transcript.jsonl", 300);
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.output.find("160 rounds: 160 ok, 0 drift, 0 corrupt"), std::string::npos) << d.output;
  // logprobs need every token's logits where it is drawn: the decode server computes such a prompt itself.
  const auto lp = testing::HttpPost(server->port(), "/v1/completions",
                                    R"({"prompt":"Once upon a time","max_tokens":4,"logprobs":1})");
  EXPECT_EQ(lp.status, 200) << lp.body;
  const json lpj = json::parse(lp.body, nullptr, false);
  ASSERT_TRUE(lpj.is_object()) << lp.body;
  EXPECT_EQ(lpj["choices"][0]["logprobs"]["token_logprobs"].size(), 4u) << lp.body;
  const std::string log = server->Log();
  int poisoning = 0;
  for (size_t at = log.find("WARNING: --debug-poison-pages"); at != std::string::npos;
       at = log.find("WARNING: --debug-poison-pages", at + 1)) {
    ++poisoning;
  }
  EXPECT_EQ(poisoning, 2) << "the prefill engine and the decode server both poison\n" << log;
  EXPECT_EQ(server->Terminate(), 0);
}

TEST_P(Agentic, UnsafeEarlyCommitWithDelayedWritesIsReportedCorrupt) {
  // Writes land 200 ms late: on a loaded machine a decode step can start
  // 20 ms after the commit and find them landed, leaving one corrupt round
  // in sixteen (seen in CI), and then the differential oracle may meet it
  // only at a near-tie.
  auto server = Disagg({"--debug-unsafe-early-commit", "--debug-put-delay-us", "200000", "--verify-handoff", "off"});
  ASSERT_TRUE(server->ok()) << server->Log();
  const std::string dir = testing::MakeTempDir();
  auto r = RunTandem(Bench(server->port(), dir, "--sweep 8 --rounds 2"), 300);
  EXPECT_EQ(r.exit_code, 3) << r.output;  // 3: the oracle found corrupt answers
  const json report = ReadJson(dir + "/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  const json& p = report["points"][0];
  EXPECT_GT(Outcome(p, "corrupt"), 0) << p.dump();
  EXPECT_EQ(Outcome(p, "timeout"), 0);
  ASSERT_FALSE(p["first_mismatches"].empty());
  EXPECT_NE(p["first_mismatches"][0].get<std::string>().find(": token "), std::string::npos);
  // Every corrupt round in the transcript names a first differing position.
  std::ifstream in(dir + "/transcript.jsonl");
  std::string line;
  int corrupt = 0;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const json j = json::parse(line);
    if (j["outcome"] != "corrupt") continue;
    ++corrupt;
    EXPECT_GE(j["first_mismatch"].get<int64_t>(), 0) << line.substr(0, 300);
    EXPECT_LT(j["first_mismatch"].get<int64_t>(), int64_t(j["token_ids"].size()));
  }
  EXPECT_EQ(corrupt, Outcome(p, "corrupt"));
  // The differential oracle, as for a foreign server: the same model served
  // colocated, asked one request at a time, judges by its logprobs. It flags
  // corruption (with positions), and only where the exact oracle did.
  ServerProcess reference({"serve", "-m", Model(), "--attention", "sparse", "--topk", "32",
                           "--index-k-dtype", "bf16"});
  ASSERT_TRUE(reference.ok()) << reference.Log();
  const std::string judged = dir + "/judged.jsonl";
  std::filesystem::copy_file(dir + "/transcript.jsonl", judged);
  auto dv = RunTandem("verify --write --reference-url 127.0.0.1:" + std::to_string(reference.port()) + " " + judged, 300);
  EXPECT_EQ(dv.exit_code, 3) << dv.output;
  {
    std::istringstream lines(dv.output);
    std::string counts;
    while (std::getline(lines, counts) && counts.find(" rounds: ") == std::string::npos) {
    }
    std::cout << "[ agentic ] unsafe early commit: " << Outcome(p, "corrupt")
              << " corrupt rounds by the exact oracle; the differential: " << counts << "\n";
  }
  EXPECT_NE(dv.output.find("=corrupt@token"), std::string::npos) << dv.output;
  std::ifstream exact(dir + "/transcript.jsonl"), diff(judged);
  std::string a, b;
  int flagged = 0;
  std::getline(exact, a);
  std::getline(diff, b);
  while (std::getline(exact, a) && std::getline(diff, b)) {
    const json x = json::parse(a), y = json::parse(b);
    if (y["outcome"] == "corrupt") {
      ++flagged;
      EXPECT_EQ(x["outcome"], "corrupt") << "a differential verdict the exact oracle does not share: "
                                         << y["verify_note"];
    }
  }
  EXPECT_GT(flagged, 0);
  std::cout << "[ differential ] " << flagged << " of " << corrupt << " exactly-corrupt rounds flagged\n";
  auto v = RunTandem("verify " + dir + "/transcript.jsonl -m " + Model(), 300);
  EXPECT_EQ(v.exit_code, 3) << v.output;
  EXPECT_NE(v.output.find("=corrupt@token"), std::string::npos) << v.output;
  // Judged as if another build had served it (the header's numerics identity
  // says an older version): the drift rule still calls the stale index-K reads corrupt.
  std::ifstream original(dir + "/transcript.jsonl");
  std::string header_line, rest;
  std::getline(original, header_line);
  json header = json::parse(header_line);
  ASSERT_TRUE(header["server_numerics"].is_object()) << header_line.substr(0, 400);
  header["server_numerics"] = OlderBuild(header["server_numerics"]);
  const std::string older = dir + "/older.jsonl";
  {
    std::ofstream out(older);
    out << header.dump() << "\n" << original.rdbuf();
  }
  auto across = RunTandem("verify " + older + " -m " + Model(), 300);
  EXPECT_EQ(across.exit_code, 3) << across.output;
  EXPECT_NE(across.output.find("they differ in version"), std::string::npos) << across.output;
  EXPECT_NE(across.output.find("=corrupt@token"), std::string::npos) << across.output;
}

// Invariant 9. A server whose kernels round differently (the fault library's
// numerics variant stands for another build) answers a little differently
// from the reference: nothing is corrupt, the report says the identities
// differ and which rounds drifted, and the exit code says "drift". The same
// transcript judged by `verify`, exactly and against a reference deployment:
// 0 corrupt either way. (The variant moves outputs by one ulp, a reordered
// sum's size; "coarse", 2^-12, flips dsa-tiny's sparse selections enough
// that some tokens fall 0.8-1.1 nats below the reference's: see issue 31's note.)
TEST_P(Agentic, AnotherBuildsAnswersAreDriftNotCorruption) {
  ServerProcess server({"serve", "-m", Model(), "--debug-numerics-variant", "ulp"});
  ASSERT_TRUE(server.ok()) << server.Log();
  const std::string dir = testing::MakeTempDir();
  auto r = RunTandem(Bench(server.port(), dir, "--sweep 16 --rounds 3 --initial-tokens 300 --gen-tokens 128"), 300);
  EXPECT_EQ(r.exit_code, 6) << r.output;  // 6: judged across numerics identities, none corrupt
  const json report = ReadJson(dir + "/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_FALSE(report["numerics"]["judged_exactly"].get<bool>()) << report["numerics"].dump();
  EXPECT_EQ(report["numerics"]["server"]["kernel_variant"], "debug-ulp");
  EXPECT_NE(report["numerics"]["note"].get<std::string>().find("kernel variant"), std::string::npos);
  const json& p = report["points"][0];
  EXPECT_EQ(Outcome(p, "corrupt"), 0) << p.dump();
  EXPECT_EQ(Outcome(p, "ok") + Outcome(p, "drift"), p["rounds"].get<int64_t>()) << p.dump();
  std::cout << "[ numerics ] " << Outcome(p, "drift") << " of " << p["rounds"] << " rounds drifted\n";
  // Deterministic (invariant 5): the llama model's greedy answers flip at one
  // near-tie here (6e-6 nats); dsa-tiny's at none.
  if (GetParam() == "tiny") {
    EXPECT_GE(Outcome(p, "drift"), 1) << p.dump();
  }
  auto v = RunTandem("verify " + dir + "/transcript.jsonl -m " + Model(), 300);
  EXPECT_EQ(v.exit_code, 6) << v.output;
  EXPECT_NE(v.output.find(" 0 corrupt"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("judged across numerics identities"), std::string::npos) << v.output;
  ServerProcess reference({"serve", "-m", Model()});
  ASSERT_TRUE(reference.ok()) << reference.Log();
  auto d = RunTandem("verify --reference-url 127.0.0.1:" + std::to_string(reference.port()) + " " + dir +
                         "/transcript.jsonl", 300);
  EXPECT_TRUE(d.exit_code == 0 || d.exit_code == 6) << d.output;
  EXPECT_NE(d.output.find(" 0 corrupt"), std::string::npos) << d.output;
}

// A prefill engine of other numerics and a decode server refuse each other,
// naming both identities; with --allow-mixed-numerics they serve, the decode
// server reports a mixed identity, and the oracle judges by the drift rule.
TEST_P(Agentic, MixedNumericsAreRefusedUnlessAllowedAndThenJudgedAsDrift) {
  {
    auto refused = Disagg({"--debug-numerics-variant", "ulp", "--peer-timeout-ms", "1000"});
    ASSERT_TRUE(refused->ok()) << refused->Log();
    EXPECT_TRUE(testing::WaitUntil([&] { return refused->Log().find("numerics mismatch") != std::string::npos; },
                                   std::chrono::seconds(10), std::chrono::milliseconds(100)))
        << refused->Log();
    EXPECT_NE(refused->Log().find("debug-ulp"), std::string::npos) << refused->Log();
    EXPECT_NE(refused->Log().find("--allow-mixed-numerics"), std::string::npos) << refused->Log();
  }
  auto mixed = Disagg({"--debug-numerics-variant", "ulp", "--allow-mixed-numerics"});
  ASSERT_TRUE(mixed->ok()) << mixed->Log();
  const auto models = testing::HttpGet(mixed->port(), "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  const json m = json::parse(models.body, nullptr, false);
  EXPECT_TRUE(m["data"][0]["tandem"]["numerics"]["mixed"].get<bool>()) << models.body;
  const std::string dir = testing::MakeTempDir();
  auto r = RunTandem(Bench(mixed->port(), dir, "--sweep 4 --rounds 2 --initial-tokens 300 --gen-tokens 32"), 300);
  EXPECT_EQ(r.exit_code, 6) << r.output;
  const json report = ReadJson(dir + "/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_FALSE(report["numerics"]["judged_exactly"].get<bool>());
  EXPECT_NE(report["numerics"]["note"].get<std::string>().find("mixed deployment"), std::string::npos)
      << report["numerics"].dump();
  const json& p = report["points"][0];
  EXPECT_EQ(Outcome(p, "corrupt"), 0) << p.dump();
  EXPECT_EQ(Outcome(p, "ok") + Outcome(p, "drift"), p["rounds"].get<int64_t>()) << p.dump();
  // The decode server's metrics split the requests' time; the phases add up to it.
  ASSERT_TRUE(p["time_split"].is_object()) << p.dump();
  double sum = 0;
  for (const auto& [phase, share] : p["time_split"].items()) sum += share.get<double>();
  EXPECT_NEAR(sum, 1.0, 0.05) << p["time_split"].dump();
  EXPECT_GT(p["time_split"].value("prefill_compute", 0.0), 0.0) << p["time_split"].dump();
}

// Published traces through serve --disagg, verified: a Mooncake request trace
// (its shared hash-id blocks become shared prompt prefixes, which the prefix
// caches then serve) and multi-turn conversations.
TEST_P(Agentic, PublishedTracesReplayVerifiedThroughDisagg) {
  auto server = Disagg({});
  ASSERT_TRUE(server->ok()) << server->Log();
  const std::string traces = std::string(TANDEM_SOURCE_DIR) + "/tests/loadgen/traces/";
  const std::string dir = testing::MakeTempDir();
  auto r = RunTandem(Bench(server->port(), dir + "/m",
                           "--trace " + traces + "mooncake_1000.jsonl --trace-limit 200 --trace-scale 0.05 "
                           "--trace-speed 0 --trace-workers 16"),
                     600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  json report = ReadJson(dir + "/m/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_EQ(report["preset"], "trace:mooncake_1000.jsonl");
  json p = report["points"][0];
  EXPECT_EQ(p["rounds"], 200);
  EXPECT_EQ(Outcome(p, "ok"), 200) << p.dump();
  EXPECT_GT(p["cached_tokens"].get<int64_t>(), 0) << "shared hash ids are shared prefixes: " << p.dump();
  EXPECT_TRUE(p["time_split"].is_object()) << p.dump();
  auto c = RunTandem(Bench(server->port(), dir + "/c",
                           "--trace " + traces + "conversations.jsonl --trace-speed 4 --trace-workers 8"),
                     600);
  EXPECT_EQ(c.exit_code, 0) << c.output;
  report = ReadJson(dir + "/c/report.json");
  ASSERT_FALSE(report.is_discarded()) << c.output;
  p = report["points"][0];
  EXPECT_GE(p["rounds"].get<int64_t>(), 72);
  EXPECT_EQ(Outcome(p, "ok"), p["rounds"].get<int64_t>()) << p.dump();
  EXPECT_GT(p["later_round_hit_rate"].get<double>(), 0.5) << p.dump();  // each turn re-sends the conversation
}

TEST_P(Agentic, AWedgedServerStopsTheSweepWithAClearMessage) {
  // The prefill engine stops sending after 6 messages: commits, heartbeats and
  // abort acknowledgements never arrive. The decode server declares it dead
  // (quarantine released by closing the link) and reports itself unhealthy:
  // a wedged engine on probation never takes handoffs again. (Without
  // --no-local-prefill it would compute the prompts itself and stay healthy.)
  auto server = Disagg({"--debug-wedge-after-messages", "6", "--request-timeout", "3", "--no-local-prefill"});
  ASSERT_TRUE(server->ok()) << server->Log();
  const std::string dir = testing::MakeTempDir();
  auto r = RunTandem(Bench(server->port(), dir, "--sweep 8,16,32 --rounds 2 --recovery-timeout 4 --round-timeout 20"), 300);
  EXPECT_EQ(r.exit_code, 4) << r.output;  // 4: stopped by the health gate
  EXPECT_NE(r.output.find("sweep stopped before the 16-session point"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not return to baseline"), std::string::npos) << r.output;
  const json report = ReadJson(dir + "/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_EQ(report["points"].size(), 1u);  // nothing measured after the gate refused
  // What the gate saw depends on when it looked: the aborted handoffs still
  // quarantined (before the peer timeout), or the link declared dead.
  const std::string stopped = report["stopped"].get<std::string>();
  EXPECT_TRUE(stopped.find("/health answered 503") != std::string::npos ||
              stopped.find("quarantined") != std::string::npos)
      << stopped;
  // The stuck rounds are timeouts (the server's deadline), never corruption.
  EXPECT_GT(Outcome(report["points"][0], "timeout"), 0);
  EXPECT_EQ(Outcome(report["points"][0], "corrupt"), 0);
}

// Standard OpenAI fields only: no token ids come back, answers may stop at
// end-of-generation, and the oracle judges them by text.
TEST_P(Agentic, PlainOpenAIRequestsAreJudgedByText) {
  ServerProcess server({"serve", "-m", Model(), "--attention", "sparse", "--topk", "32"});
  ASSERT_TRUE(server.ok()) << server.Log();
  const std::string dir = testing::MakeTempDir();
  auto r = RunTandem(Bench(server.port(), dir, "--plain-openai --sweep 4 --rounds 2 --initial-tokens 300"), 300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const json report = ReadJson(dir + "/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_FALSE(report["shape"]["extensions"].get<bool>());
  EXPECT_EQ(Outcome(report["points"][0], "ok"), 8) << report.dump();
  std::ifstream in(dir + "/transcript.jsonl");
  std::string line;
  std::getline(in, line);
  ASSERT_TRUE(std::getline(in, line));
  const json round = json::parse(line);
  EXPECT_FALSE(round.contains("token_ids"));
  EXPECT_FALSE(round["request"].contains("return_token_ids"));
  EXPECT_NE(round["verify_note"].get<std::string>().find("text identical"), std::string::npos) << line.substr(0, 300);
}

// The server's chat format (template and day) is part of what the oracle
// replays: a reference that would render prompts differently refuses to
// judge and says what to pass; given the same, every round verifies.
TEST_P(Agentic, AReferenceWithAnotherChatTemplateRefusesToJudge) {
  const std::string dir = testing::MakeTempDir();
  const std::string tmpl = dir + "/chat.jinja";
  std::ofstream(tmpl) << "{{ bos_token }}Today is {{ strftime_now('%d %B %Y') }}.\n"
                         "{% for m in messages %}{{ m.role }}: {{ m.content | trim }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}";
  ServerProcess server({"serve", "-m", Model(), "--chat-template", tmpl, "--chat-date", "2026-12-02"});
  ASSERT_TRUE(server.ok()) << server.Log();
  auto refused = RunTandem(Bench(server.port(), dir + "/a", "--sweep 2 --rounds 1 --initial-tokens 200"), 120);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("give this command the server's --chat-template and --chat-date"), std::string::npos)
      << refused.output;
  auto other_day = RunTandem(Bench(server.port(), dir + "/b", "--sweep 2 --rounds 1 --initial-tokens 200 --chat-template " +
                                                                  tmpl),
                             120);
  EXPECT_NE(other_day.exit_code, 0) << "the same template on another day renders another prompt";
  auto r = RunTandem(Bench(server.port(), dir + "/c", "--sweep 2 --rounds 2 --initial-tokens 200 --chat-template " +
                                                          tmpl + " --chat-date 2026-12-02"),
                     120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const json report = ReadJson(dir + "/c/report.json");
  ASSERT_FALSE(report.is_discarded()) << r.output;
  EXPECT_EQ(Outcome(report["points"][0], "ok"), 4) << report.dump();
}

TEST_P(Agentic, BadArgumentsAreRefusedWithAMessage) {
  auto r = RunTandem("bench agentic --url nowhere", 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("--url must be host:port"), std::string::npos) << r.output;
  r = RunTandem("bench agentic --url 127.0.0.1:1", 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("no answer from http://127.0.0.1:1/v1/models"), std::string::npos) << r.output;
  r = RunTandem("verify /nonexistent/transcript.jsonl", 30);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cannot open transcript"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Models, Agentic, testing::kTestModels, testing::ModelInstanceName);

}  // namespace
}  // namespace tandem
