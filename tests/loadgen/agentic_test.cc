// The agentic load generator's parts that need no server: deterministic
// sessions, transcript records, the exact oracle (against generations made
// here, then corrupted on purpose), and the report's JSON schema and SVG.
#include "loadgen/agentic.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <cstdio>
#include <thread>
#include <fstream>

#include "loadgen/differential.h"
#include "loadgen/report.h"
#include "loadgen/verify.h"
#include "model/numerics.h"
#include "runtime/generator.h"
#include "support/paths.h"
#include "support/process.h"
#include "support/test_models.h"
#include "support/tiny_model.h"

namespace tandem {
namespace {

using Json = nlohmann::json;

TEST(AgenticShape, PresetsAndSyntheticTextAreDeterministic) {
  for (const char* name : {"small", "medium", "incident", "production"}) {
    auto s = AgenticPreset(name);
    ASSERT_TRUE(s.ok()) << name;
    EXPECT_GE(s->rounds, 1);
    EXPECT_LE(s->tool_min, s->tool_max);
  }
  auto prod = AgenticPreset("production");
  // The real shape: 2k tokens growing toward 80k over the rounds.
  EXPECT_EQ(prod->initial_tokens, 2048);
  const int64_t final_ctx = prod->initial_tokens + int64_t(prod->rounds) * (prod->gen_tokens + prod->tool_max);
  EXPECT_GE(final_ctx, 75000);
  EXPECT_LE(final_ctx, 90000);
  // The incident's shape: 2k growing past 32k on average (tool results of
  // mean length, before the chat template's own tokens), 16..80 sessions.
  auto inc = AgenticPreset("incident");
  EXPECT_EQ(inc->initial_tokens, 2048);
  const int64_t mean_tool = (inc->tool_min + inc->tool_max) / 2;
  EXPECT_GT(inc->initial_tokens + int64_t(inc->rounds) * (inc->gen_tokens + mean_tool), 32768);
  EXPECT_EQ(inc->sweep.front(), 16);
  EXPECT_EQ(inc->sweep.back(), 80);
  EXPECT_EQ(AgenticPreset("huge").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SyntheticText(3, 200), SyntheticText(3, 200));
  EXPECT_NE(SyntheticText(3, 200), SyntheticText(4, 200));
  // Word count follows tokens / tokens_per_word.
  auto words = [](const std::string& t) { return std::count(t.begin(), t.end(), ' ') + 1; };
  EXPECT_NEAR(double(words(SyntheticText(9, 1000))), 1000 * 0.9, 120);
  EXPECT_NEAR(double(words(SyntheticText(9, 1000, 2.0))), 500 * 0.9, 70);
}

// The health gate against a server that is not tandem: /metrics is optional
// (llama-server answers 501 without --metrics), the gate says what it could
// not check, and an unhealthy /health is reported with its status.
TEST(AgenticGate, AServerWithoutMetricsIsJudgedByHealthAloneAndSaysSo) {
  httplib::Server server;
  std::atomic<int> health{200};
  server.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
    res.status = health.load();
    res.set_content("{}", "application/json");
  });
  server.Get("/metrics", [](const httplib::Request&, httplib::Response& res) {
    res.status = 501;
    res.set_content("This server does not support metrics endpoint.", "text/plain");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread t([&] { server.listen_after_bind(); });
  struct Stop {
    httplib::Server& server;
    std::thread& t;
    ~Stop() {
      server.stop();
      t.join();
    }
  } stop{server, t};
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
       !server.is_running() && std::chrono::steady_clock::now() < until;) {
    std::this_thread::yield();
  }
  ASSERT_TRUE(server.is_running());
  ServerState s = ProbeServer("127.0.0.1", port);
  EXPECT_TRUE(s.reachable && s.healthy && !s.tandem) << s.detail;
  EXPECT_TRUE(s.AtBaseline()) << s.detail;
  EXPECT_NE(s.unchecked.find("/metrics answered 501"), std::string::npos) << s.unchecked;
  EXPECT_TRUE(WaitForBaseline("127.0.0.1", port, 2).ok());
  health = 503;
  s = ProbeServer("127.0.0.1", port);
  EXPECT_FALSE(s.healthy);
  EXPECT_EQ(s.detail, "/health answered 503");
  const Status st = WaitForBaseline("127.0.0.1", port, 0.3);
  EXPECT_NE(st.message().find("/health answered 503"), std::string::npos) << st.ToString();
}

TEST(AgenticRecords, RoundAndHeaderSurviveJson) {
  RoundRecord r;
  r.point = 2;
  r.concurrency = 64;
  r.session = 17;
  r.round = 3;
  r.append = Json::array({{{"role", "tool"}, {"content", "out"}}});
  r.request = {{"max_tokens", 8}, {"temperature", 0}};
  r.http_status = 200;
  r.outcome = kCorrupt;
  r.text = "héllo";
  r.token_ids = {5, 6, 7};
  r.has_token_ids = true;
  r.finish_reason = "length";
  r.prompt_tokens = 900;
  r.cached_tokens = 640;
  r.gaps_s = {0.01, 0.02};
  r.first_mismatch = 1;
  auto back = RoundFromJson(ToJson(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(ToJson(*back), ToJson(r));
  RoundRecord no_ids = r;
  no_ids.has_token_ids = false;
  no_ids.token_ids.clear();
  EXPECT_FALSE(RoundFromJson(ToJson(no_ids))->has_token_ids);
  EXPECT_FALSE(RoundFromJson(Json{{"type", "round"}}).ok());

  TranscriptHeader h;
  h.model = "m";
  h.preset = "small";
  h.shape = *AgenticPreset("small");
  h.shape.tokens_per_word = 2.5;
  h.server_attention = {{"kind", "sparse"}, {"top_k", 16}, {"index_k_dtype", "bf16"}};
  auto hb = HeaderFromJson(ToJson(h));
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(ToJson(*hb), ToJson(h));
  auto att = AttentionFromHeader(h.server_attention, {});
  ASSERT_TRUE(att.ok());
  EXPECT_EQ(att->kind, AttentionKind::kSparse);
  EXPECT_EQ(att->top_k, 16);
  EXPECT_EQ(att->index_k_dtype, CacheDType::kBF16);

  // A transcript file round trip; a broken line names its line number.
  const std::string dir = testing::MakeTempDir();
  ASSERT_TRUE(WriteTranscript(dir + "/t.jsonl", h, {r, r}).ok());
  TranscriptHeader h2;
  std::vector<RoundRecord> rounds;
  ASSERT_TRUE(ReadTranscript(dir + "/t.jsonl", &h2, &rounds).ok());
  EXPECT_EQ(rounds.size(), 2u);
  std::ofstream(dir + "/t.jsonl", std::ios::app) << "{not json\n";
  const Status bad = ReadTranscript(dir + "/t.jsonl", &h2, &rounds);
  EXPECT_NE(bad.message().find(":4: not JSON"), std::string::npos) << bad.ToString();
}

// Rounds generated here with the reference generator: the oracle must call
// them identical, and name the exact token where a corrupted copy differs.
// Every oracle test runs on the tiny llama model and on dsa-tiny (deepseek32).
class Oracle : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    m_ = testing::MakePresetModel(GetParam(), TensorType::kF32);
    info_.id = m_->model->config().name;
    info_.context_length = 4096;
    info_.tokenizer = &m_->model->tokenizer();
    info_.chat_format = &m_->model->chat_format();
  }

  // Two rounds of one session: messages, generation, appended answer + tool result.
  std::vector<RoundRecord> Session(const AttentionOptions& attention, float temperature, int n_rounds = 2) {
    ThreadPool threads(2);
    auto spec = MakeCacheSpec(m_->model->config(), attention);
    EXPECT_TRUE(spec.ok());
    std::vector<RoundRecord> out;
    Json messages = Json::array();
    Json append = Json::array({{{"role", "system"}, {"content", SyntheticText(1, 120)}},
                               {{"role", "user"}, {"content", "Task: " + SyntheticText(2, 20)}}});
    for (int r = 0; r < n_rounds; ++r) {
      for (auto& m : append) messages.push_back(m);
      RoundRecord rec;
      rec.session = 0;
      rec.round = r;
      rec.append = append;
      rec.request = {{"max_tokens", 24}, {"temperature", temperature}, {"seed", 77}, {"ignore_eos", true}};
      Json body = rec.request;
      body["messages"] = messages;
      auto parsed = ParseChatCompletionRequest(body.dump(), info_);
      EXPECT_TRUE(std::holds_alternative<ParsedRequest>(parsed));
      const ParsedRequest& req = std::get<ParsedRequest>(parsed);
      Generator gen(*m_->model, *spec, threads, 4096);
      GenerateOptions opt;
      opt.sampling = req.spec.sampling;
      opt.max_tokens = req.spec.max_tokens;
      opt.ignore_eos = true;
      auto g = gen.Run(req.spec.prompt, opt, nullptr);
      EXPECT_TRUE(g.ok());
      rec.token_ids = g->tokens;
      rec.has_token_ids = true;
      rec.text = g->text;
      rec.finish_reason = FinishReasonName(g->finish);
      rec.prompt_tokens = int64_t(req.spec.prompt.size());
      rec.completion_tokens = int64_t(g->tokens.size());
      rec.http_status = 200;
      out.push_back(rec);
      append = Json::array({{{"role", "assistant"}, {"content", g->text}},
                            {{"role", "tool"}, {"content", SyntheticText(3 + uint64_t(r), 40)}}});
    }
    return out;
  }

  static AttentionOptions Sparse(CacheDType index_k) {
    AttentionOptions a;
    a.kind = AttentionKind::kSparse;
    a.top_k = 16;
    a.index_k_dtype = index_k;
    return a;
  }

  VerifyOptions Opts(bool from_scratch = false) const {
    VerifyOptions o;
    o.threads = 2;
    o.model_id = info_.id;
    o.from_scratch = from_scratch;
    return o;
  }

  std::unique_ptr<testing::InMemoryModel> m_;
  ModelInfo info_;
};

TEST_P(Oracle, IdenticalRoundsAreOkAndTheFirstCorruptTokenIsNamed) {
  const AttentionOptions sparse = Sparse(CacheDType::kBF16);
  for (const AttentionOptions& attention : {AttentionOptions{}, sparse}) {
    for (float temperature : {0.0f, 0.9f}) {
      std::vector<RoundRecord> rounds = Session(attention, temperature);
      ASSERT_EQ(rounds.size(), 2u);
      ASSERT_TRUE(VerifyRounds(*m_->model, attention, &rounds, Opts()).ok());
      for (const auto& r : rounds) {
        EXPECT_EQ(r.outcome, kOk) << r.verify_note << " temperature " << temperature;
        EXPECT_EQ(r.first_mismatch, -1);
      }
      // Corrupt token 5 of round 1 (as a wrong cache would): caught at 5.
      std::vector<RoundRecord> bad = Session(attention, temperature);
      bad[1].token_ids[5] = (bad[1].token_ids[5] + 1) % int32_t(m_->model->config().vocab_size);
      ASSERT_TRUE(VerifyRounds(*m_->model, attention, &bad, Opts()).ok());
      EXPECT_EQ(bad[0].outcome, kOk);
      EXPECT_EQ(bad[1].outcome, kCorrupt);
      EXPECT_EQ(bad[1].first_mismatch, 5) << bad[1].verify_note;
      // Verified under the wrong attention, correct answers do not pass.
      if (attention.kind == AttentionKind::kSparse) {
        std::vector<RoundRecord> as_dense = Session(attention, temperature);
        ASSERT_TRUE(VerifyRounds(*m_->model, AttentionOptions{}, &as_dense, Opts()).ok());
        EXPECT_TRUE(as_dense[0].outcome == kCorrupt || as_dense[1].outcome == kCorrupt);
      }
    }
  }
}

TEST_P(Oracle, WithoutTokenIdsTextIsCompared) {
  std::vector<RoundRecord> rounds = Session({}, 0.0f);
  for (auto& r : rounds) {
    r.has_token_ids = false;
    r.token_ids.clear();
  }
  rounds[1].text.back() ^= 1;  // changes the last character
  ASSERT_TRUE(VerifyRounds(*m_->model, {}, &rounds, Opts()).ok());
  EXPECT_EQ(rounds[0].outcome, kOk) << rounds[0].verify_note;
  EXPECT_EQ(rounds[1].outcome, kCorrupt);
  EXPECT_GT(rounds[1].first_mismatch, 0);
  // Timeouts and errors are left as they are: they say nothing about corruption.
  std::vector<RoundRecord> t = Session({}, 0.0f);
  t[1].outcome = kTimeout;
  ASSERT_TRUE(VerifyRounds(*m_->model, {}, &t, Opts()).ok());
  EXPECT_EQ(t[1].outcome, kTimeout);
}

// Linear-time verification: carrying each session's reference cache from
// round to round gives the verdicts of replaying every round from token 0,
// corrupt rounds included (their served tokens sit in the carried cache and
// the next round must recompute from where its prompt differs), while the
// forward pass runs over far fewer tokens.
TEST_P(Oracle, CarryingTheSessionCacheGivesTheVerdictsOfReplayingFromScratch) {
  const AttentionOptions sparse = Sparse(CacheDType::kFp8E4M3Scaled);
  for (const AttentionOptions& attention : {AttentionOptions{}, sparse}) {
    std::vector<RoundRecord> clean = Session(attention, 0.7f, 6);
    std::vector<RoundRecord> bad = clean;
    const int32_t vocab = int32_t(m_->model->config().vocab_size);
    bad[1].token_ids[3] = (bad[1].token_ids[3] + 1) % vocab;
    bad[3].token_ids[0] = (bad[3].token_ids[0] + 7) % vocab;
    bad[5].token_ids.back() = (bad[5].token_ids.back() + 1) % vocab;
    for (std::vector<RoundRecord>* rounds : {&clean, &bad}) {
      std::vector<RoundRecord> carried = *rounds, scratch = *rounds;
      int64_t carried_tokens = 0, scratch_tokens = 0;
      VerifyOptions with_carry = Opts(), from_scratch = Opts(true);
      with_carry.on_progress = [&](const VerifyProgress& p) { carried_tokens = p.tokens_computed; };
      from_scratch.on_progress = [&](const VerifyProgress& p) { scratch_tokens = p.tokens_computed; };
      ASSERT_TRUE(VerifyRounds(*m_->model, attention, &carried, with_carry).ok());
      ASSERT_TRUE(VerifyRounds(*m_->model, attention, &scratch, from_scratch).ok());
      for (size_t i = 0; i < carried.size(); ++i) {
        EXPECT_EQ(carried[i].outcome, scratch[i].outcome) << "round " << i << ": " << carried[i].verify_note;
        EXPECT_EQ(carried[i].first_mismatch, scratch[i].first_mismatch) << "round " << i;
        EXPECT_EQ(carried[i].verify_note, scratch[i].verify_note) << "round " << i;
      }
      EXPECT_LT(carried_tokens * 2, scratch_tokens) << "the carried cache is reused";
    }
    EXPECT_EQ(clean[0].outcome, kUnverified);  // the copies were judged, not the originals
    std::vector<RoundRecord> judged = bad;
    ASSERT_TRUE(VerifyRounds(*m_->model, attention, &judged, Opts()).ok());
    const char* want[] = {kOk, kCorrupt, kOk, kCorrupt, kOk, kCorrupt};
    for (size_t i = 0; i < judged.size(); ++i) EXPECT_EQ(judged[i].outcome, want[i]) << "round " << i;
    EXPECT_EQ(judged[1].first_mismatch, 3);
    EXPECT_EQ(judged[3].first_mismatch, 0);
    EXPECT_EQ(judged[5].first_mismatch, int64_t(judged[5].token_ids.size()) - 1);
  }
}

// Invariant 9: across numerics identities a differing token is judged by its
// margin at the reference: a near-tie is drift, anything further corruption;
// a sampled draw is not judged by margins (unverified); clean rounds stay ok.
TEST_P(Oracle, AcrossNumericsIdentitiesDifferingTokensAreJudgedByTheirMargin) {
  for (float temperature : {0.0f, 0.9f}) {
    std::vector<RoundRecord> bad = Session({}, temperature);
    bad[1].token_ids[5] = (bad[1].token_ids[5] + 1) % int32_t(m_->model->config().vocab_size);
    bad[1].text.clear();  // the ids are the served answer here; the text check needs it to match
    {
      StreamDecoder d(m_->model->tokenizer());
      for (int32_t t : bad[1].token_ids) bad[1].text += d.Push(t);
      bad[1].text += d.Flush();
    }
    VerifyOptions lenient = Opts(), strict = Opts();
    lenient.exact = strict.exact = false;
    lenient.near_tie_nats = 1e6;  // every token a near-tie
    strict.near_tie_nats = 0;     // no token a near-tie
    std::vector<RoundRecord> a = bad, b = bad;
    ASSERT_TRUE(VerifyRounds(*m_->model, {}, &a, lenient).ok());
    ASSERT_TRUE(VerifyRounds(*m_->model, {}, &b, strict).ok());
    EXPECT_EQ(a[0].outcome, kOk) << a[0].verify_note;
    EXPECT_EQ(b[0].outcome, kOk) << b[0].verify_note;
    if (temperature > 0) {
      EXPECT_EQ(a[1].outcome, kUnverified) << a[1].verify_note;
      EXPECT_NE(a[1].verify_note.find("sampled"), std::string::npos) << a[1].verify_note;
      continue;
    }
    EXPECT_EQ(a[1].outcome, kDrift) << a[1].verify_note;
    EXPECT_EQ(a[1].first_mismatch, 5) << a[1].verify_note;
    EXPECT_NE(a[1].verify_note.find("nats"), std::string::npos) << a[1].verify_note;
    EXPECT_EQ(b[1].outcome, kCorrupt) << b[1].verify_note;
    EXPECT_EQ(b[1].first_mismatch, 5);
    EXPECT_NE(b[1].verify_note.find("more than a near-tie"), std::string::npos) << b[1].verify_note;
  }
}

TEST_P(Oracle, TheNumericsIdentitySaysWhetherVerdictsAreExact) {
  auto spec = MakeCacheSpec(m_->model->config(), {});
  ASSERT_TRUE(spec.ok());
  const NumericsIdentity mine = ComputeNumericsIdentity(*m_->model, *spec);
  auto same = JudgeNumerics(*m_->model, {}, mine.ToJson());
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->exact) << same->note;
  EXPECT_EQ(same->server_id, mine.Id());
  NumericsIdentity older = mine;
  older.version = kNumericsVersion - 1;
  auto across = JudgeNumerics(*m_->model, {}, older.ToJson());
  ASSERT_TRUE(across.ok());
  EXPECT_FALSE(across->exact);
  EXPECT_NE(across->note.find("they differ in version"), std::string::npos) << across->note;
  auto unknown = JudgeNumerics(*m_->model, {}, Json());
  ASSERT_TRUE(unknown.ok());
  EXPECT_FALSE(unknown->exact);
  EXPECT_NE(unknown->note.find("did not say"), std::string::npos) << unknown->note;
  // Another attention is another identity; a hand-edited id is refused.
  EXPECT_FALSE(JudgeNumerics(*m_->model, Sparse(CacheDType::kBF16), mine.ToJson())->exact);
  Json edited = mine.ToJson();
  edited["kernel_variant"] = "x";
  auto unreadable = JudgeNumerics(*m_->model, {}, edited);  // foreign: judged by margins, never an error
  ASSERT_TRUE(unreadable.ok());
  EXPECT_FALSE(unreadable->exact);
  EXPECT_NE(unreadable->note.find("not one this build can read"), std::string::npos) << unreadable->note;
}

TEST_P(Oracle, AMissingRoundIsReported) {
  std::vector<RoundRecord> rounds = Session({}, 0.0f);
  rounds.erase(rounds.begin());
  const Status st = VerifyRounds(*m_->model, {}, &rounds, Opts());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("missing round 0"), std::string::npos) << st.ToString();
}

// The differential oracle's walk along the reference's tokens.
Json Entry(const std::string& token, double logprob, std::vector<std::pair<std::string, double>> top) {
  auto bytes = [](const std::string& t) {
    Json b = Json::array();
    for (unsigned char c : t) b.push_back(int(c));
    return b;
  };
  Json e = {{"token", token}, {"logprob", logprob}, {"bytes", bytes(token)}, {"top_logprobs", Json::array()}};
  for (auto& [t, lp] : top) e["top_logprobs"].push_back({{"token", t}, {"logprob", lp}, {"bytes", bytes(t)}});
  return e;
}

INSTANTIATE_TEST_SUITE_P(Models, Oracle, testing::kTestModels, testing::ModelInstanceName);

// Issue 31: byte-fallback tokens are incomplete UTF-8; a server's text shows
// broken sequences as U+FFFD, so judging by text called a near-tie corrupt
// ("continues with '\xEF\xBF\xBDbun...', not among the reference's top 5").
// Judged by the bytes now.
TEST(Differential, BrokenUtf8IsJudgedByTheBytesNotTheText) {
  const std::string e6("\xE6"), e5("\xE5"), fffd("\xEF\xBF\xBD");
  const Json ref = Json::array({Entry("Once", -0.1, {{"Once", -0.1}}),
                                Entry(" upon", -0.70, {{" upon", -0.70}, {e5, -0.71}, {" a", -3.0}}),
                                Entry(" a", -0.2, {{" a", -0.2}})});
  // The server took the incomplete byte 0.01 nats below " upon": drift.
  Divergence d = Compare(ref, "Once upon a", "Once" + fffd + "bun", "length", 0.5);
  EXPECT_EQ(d.kind, Divergence::Kind::kNearTie) << d.detail;
  EXPECT_EQ(d.token, 1);
  EXPECT_NEAR(d.margin, 0.01, 1e-9);
  EXPECT_NE(d.detail.find("U+FFFD"), std::string::npos) << d.detail;
  // Far below, it is still corruption, said the same way.
  const Json far = Json::array({Entry("Once", -0.1, {{"Once", -0.1}}),
                                Entry(" upon", -0.70, {{" upon", -0.70}, {e5, -6.0}})});
  EXPECT_EQ(Compare(far, "Once upon", "Once" + fffd, "length", 0.5).kind, Divergence::Kind::kCorrupt);
  // Where the reference's own token is the incomplete one, the text cannot tell: not judged.
  const Json own = Json::array({Entry("Once", -0.1, {{"Once", -0.1}}), Entry(e6, -0.3, {{e6, -0.3}, {" a", -2.0}}),
                                Entry("\x97\xA5", -0.1, {{"\x97\xA5", -0.1}})});
  d = Compare(own, "Once\xE6\x97\xA5", "Once" + fffd + "x", "length", 0.5);
  EXPECT_EQ(d.kind, Divergence::Kind::kUnjudged) << d.detail;
  // A whole character split across byte tokens walks as bytes: identical.
  EXPECT_EQ(Compare(own, "Once\xE6\x97\xA5", "Once\xE6\x97\xA5", "length", 0.5).kind, Divergence::Kind::kSame);
}

TEST(Differential, IdenticalNearTieAndCorruptDivergencesAreTold) {
  const Json ref = Json::array({Entry("Once", -0.1, {{"Once", -0.1}, {"Then", -2.5}}),
                                Entry(" upon", -0.70, {{" upon", -0.70}, {" there", -0.72}, {" a", -3.0}}),
                                Entry(" a", -0.2, {{" a", -0.2}, {" the", -4.0}})});
  EXPECT_EQ(Compare(ref, "Once upon a", "Once upon a", "length", 0.5).kind, Divergence::Kind::kSame);
  // " there" is 0.02 nats below " upon": drift between builds, not corruption.
  Divergence d = Compare(ref, "Once upon a", "Once there was", "length", 0.5);
  EXPECT_EQ(d.kind, Divergence::Kind::kNearTie) << d.detail;
  EXPECT_EQ(d.token, 1);
  EXPECT_NEAR(d.margin, 0.02, 1e-9);
  // " a" at token 1 is 2.3 nats below: corruption, with its rank and margin.
  d = Compare(ref, "Once upon a", "Once a", "length", 0.5);
  EXPECT_EQ(d.kind, Divergence::Kind::kCorrupt) << d.detail;
  EXPECT_EQ(d.token, 1);
  EXPECT_NEAR(d.margin, 2.3, 1e-9);
  EXPECT_NE(d.detail.find("rank 3"), std::string::npos) << d.detail;
  // Token salad: nothing the reference would consider.
  d = Compare(ref, "Once upon a", "Once zq%", "length", 0.5);
  EXPECT_EQ(d.kind, Divergence::Kind::kCorrupt);
  EXPECT_EQ(d.token, 1);
  EXPECT_NE(d.detail.find("not among the reference's top 3"), std::string::npos) << d.detail;
  // The served answer ends where the reference goes on, with no end among its choices.
  EXPECT_EQ(Compare(ref, "Once upon a", "Once upon", "stop", 0.5).kind, Divergence::Kind::kCorrupt);
  // ... unless it ran out of room ("length"): nothing after that to judge.
  EXPECT_EQ(Compare(ref, "Once upon a", "Once upon", "length", 0.5).kind, Divergence::Kind::kUnjudged);
  // The reference ends first: nothing to judge the rest by.
  EXPECT_EQ(Compare(ref, "Once upon a", "Once upon a time", "length", 0.5).kind, Divergence::Kind::kUnjudged);
  // A wider tolerance turns the same margin into a near-tie.
  EXPECT_EQ(Compare(ref, "Once upon a", "Once a", "length", 3.0).kind, Divergence::Kind::kNearTie);
  // Zero-width tokens (an end of turn generated past ignore_eos) spell nothing and are skipped.
  Json with_eot = ref;
  with_eot.insert(with_eot.begin() + 1, Entry("", -0.3, {{"", -0.3}}));
  EXPECT_EQ(Compare(with_eot, "Once upon a", "Once upon a", "length", 0.5).kind, Divergence::Kind::kSame);
  // The longest alternative the served text starts with is the one taken.
  const Json longer = Json::array({Entry("Once", -0.1, {{"Once", -0.1}, {" a", -0.3}, {" aardvark", -6.0}})});
  d = Compare(longer, "Once", " aardvark", "length", 0.5);
  EXPECT_EQ(d.kind, Divergence::Kind::kCorrupt) << d.detail;
  EXPECT_NEAR(d.margin, 5.9, 1e-9);
  // Token boundaries the text alone hides: the reference's " " matches the
  // served " for", whose token was the 0.03-nat alternative " for"; the texts
  // only part a token later. That is the near-tie, not corruption at "i".
  const Json boundary = Json::array({Entry("my", -0.1, {{"my", -0.1}}),
                                     Entry(" ", -1.925, {{" ", -1.925}, {" for", -1.957}, {" a", -2.2}}),
                                     Entry("i", -1.76, {{"i", -1.76}, {"out", -1.79}})});
  d = Compare(boundary, "my i", "my for a walk", "length", 0.5);
  EXPECT_EQ(d.kind, Divergence::Kind::kNearTie) << d.detail;
  EXPECT_EQ(d.token, 1);
  EXPECT_NEAR(d.margin, 0.032, 1e-9);
  // Were " for" far below, the served text would be corrupt where it parts.
  const Json far = Json::array({Entry("my", -0.1, {{"my", -0.1}}),
                                Entry(" ", -0.5, {{" ", -0.5}, {" for", -4.0}}), Entry("i", -1.76, {{"i", -1.76}})});
  EXPECT_EQ(Compare(far, "my i", "my for a walk", "length", 0.5).kind, Divergence::Kind::kCorrupt);
  // Whatever the reference sends, the walk never throws: entries it cannot
  // read spell nothing, and what they leave of the served text is unjudged.
  EXPECT_EQ(Compare(Json::array({1, "x", nullptr, Json::object()}), "", "abc", "stop", 0.5).kind,
            Divergence::Kind::kUnjudged);
  EXPECT_EQ(Compare(Json::array({{{"token", 5}, {"bytes", "no"}, {"top_logprobs", 3}}}), "", "abc", "stop", 0.5).kind,
            Divergence::Kind::kUnjudged);
}

SweepReport SampleReport(std::vector<RoundRecord>* rounds) {
  SweepReport rep;
  rep.header.model = "tandem-tiny <&>";
  rep.header.preset = "small";
  rep.header.shape = *AgenticPreset("small");
  rep.target = "127.0.0.1:1";
  rep.verified = true;
  rep.transcript_path = "t.jsonl";
  const char* outcomes[] = {kOk, kOk, kCorrupt, kTimeout, kError};
  for (int p = 0; p < 3; ++p) {
    for (int i = 0; i < 5; ++i) {
      RoundRecord r;
      r.point = p;
      r.concurrency = 8 << p;
      r.session = i;
      r.round = i % 2;
      r.outcome = outcomes[i];
      r.first_mismatch = r.outcome == std::string(kCorrupt) ? 4 : -1;
      r.ttft_s = 0.1 * (p + 1);
      r.gaps_s = {0.01, 0.02};
      r.completion_tokens = 24;
      r.prompt_tokens = 500;
      r.cached_tokens = r.round > 0 ? 450 : 0;
      rounds->push_back(r);
    }
    rep.points.push_back(Summarize(p, 8 << p, *rounds, 2.0));
  }
  return rep;
}

TEST(AgenticReport, CountsOutcomesSeparately) {
  std::vector<RoundRecord> rounds;
  SweepReport rep = SampleReport(&rounds);
  const PointSummary& p = rep.points[0];
  EXPECT_EQ(p.rounds, 5);
  EXPECT_EQ(p.outcomes.at(kOk), 2);
  EXPECT_EQ(p.outcomes.at(kCorrupt), 1);
  EXPECT_EQ(p.outcomes.at(kTimeout), 1);
  EXPECT_EQ(p.outcomes.at(kError), 1);
  ASSERT_EQ(p.first_mismatches.size(), 1u);
  EXPECT_EQ(p.first_mismatches[0], "session 2 round 0: token 4");
  // Timeouts and errors are not in the latency or throughput figures.
  EXPECT_NEAR(p.tokens_per_s, 3 * 24 / 2.0, 1e-9);
  EXPECT_NEAR(p.later_round_hit_rate, 450.0 / 500.0, 1e-9);
  const std::string table = ReportTable(rep);
  EXPECT_NE(table.find("corrupt: session 2 round 0: token 4"), std::string::npos) << table;
}

// Python's parsers judge our files: jsonschema for report.json against the
// documented schema, ElementTree for the SVG.
TEST(AgenticReport, JsonMatchesTheDocumentedSchemaAndSvgIsWellFormed) {
  std::vector<RoundRecord> rounds;
  SweepReport rep = SampleReport(&rounds);
  const std::string dir = testing::MakeTempDir();
  // The time split of a disaggregated server, from two probes of its metrics.
  ServerState before, after;
  before.handoff_request_s = 10;
  before.phase_s = {{"prefill_queue", 4}, {"decode", 5}};
  after.handoff_request_s = 30;
  after.phase_s = {{"prefill_queue", 16}, {"prefill_compute", 3}, {"decode", 9}, {"transfer", 0.001}};
  rep.points[0].time_split = TimeSplit(before, after);
  EXPECT_NEAR(rep.points[0].time_split["prefill_queue"], 0.6, 1e-12);
  EXPECT_NEAR(rep.points[0].time_split["decode"], 0.2, 1e-12);
  EXPECT_TRUE(TimeSplit(after, after).empty());  // no requests finished in between: unknown
  EXPECT_NE(ReportTable(rep).find("time: prefill_queue 60.0% prefill_compute 15.0%"), std::string::npos)
      << ReportTable(rep);
  EXPECT_NE(ReportSvg(rep).find("where request time went"), std::string::npos);
  for (bool stopped : {false, true}) {
    if (stopped) rep.stopped = "before the 64-session point: did not return to baseline";
    std::ofstream(dir + "/report.json") << ReportJson(rep).dump(2);
    std::ofstream(dir + "/report.svg") << ReportSvg(rep);
    const std::string schema = std::string(TANDEM_SOURCE_DIR) + "/docs/agentic-report.schema.json";
    const std::string cmd =
        "python3 -c \"import json, sys, jsonschema, xml.etree.ElementTree as ET; "
        "jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))); "
        "root = ET.parse(sys.argv[3]).getroot(); "
        "assert root.tag == '{http://www.w3.org/2000/svg}svg', root.tag; "
        "n = len(root.findall('.//{http://www.w3.org/2000/svg}polyline')); "
        "assert n == 5, n; print('valid')\" " +
        dir + "/report.json " + schema + " " + dir + "/report.svg 2>&1";
    FILE* f = popen(cmd.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof(buf), f)) out += buf;
    const int rc = pclose(f);
    EXPECT_EQ(rc, 0) << out << "(needs python3 and python3-jsonschema: scripts/install-deps.sh)";
    EXPECT_NE(out.find("valid"), std::string::npos) << out;
  }
  // A report that breaks the schema is caught by the same check (the check can fail).
  Json broken = ReportJson(rep);
  broken["points"][0]["outcomes"].erase("timeout");
  std::ofstream(dir + "/broken.json") << broken.dump();
  const std::string cmd2 = "python3 -c \"import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), "
                           "json.load(open(sys.argv[2])))\" " +
                           dir + "/broken.json " + TANDEM_SOURCE_DIR + "/docs/agentic-report.schema.json >/dev/null 2>&1";
  EXPECT_NE(std::system(cmd2.c_str()), 0);
}

}  // namespace
}  // namespace tandem
