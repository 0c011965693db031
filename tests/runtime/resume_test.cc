// A resumed answer (RequestSpec::resumed) goes on exactly as the answer it
// continues: for every point k of an answer, resuming from its first k
// tokens replays those (their text, the grammar's state, the penalties'
// counts) and draws the rest, the same tokens, text, finish and usage.
#include <gtest/gtest.h>

#include "runtime/engine.h"
#include "support/test_models.h"
#include "support/wait.h"

namespace tandem {
namespace {

using testing::MakePresetModel;
using testing::PseudoRandomTokens;

struct Answer {
  std::vector<int32_t> replayed, tokens;
  std::string replayed_text, text, finish;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int replay_events = 0;
};

Answer RunAnswer(Engine& engine, RequestSpec spec) {
  Answer a;
  auto h = engine.Submit(std::move(spec));
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  if (!h.ok()) return a;
  for (;;) {
    StreamEvent ev;
    if (!(*h)->Next(&ev, std::chrono::seconds(60))) {
      ADD_FAILURE() << "no event within 60 s";
      return a;
    }
    if (ev.kind == StreamEvent::Kind::kError) {
      ADD_FAILURE() << ev.error.ToString();
      return a;
    }
    if (ev.kind == StreamEvent::Kind::kFinish) {
      a.finish = FinishReasonName(ev.finish);
      a.prompt_tokens = ev.prompt_tokens;
      a.completion_tokens = ev.completion_tokens;
      return a;
    }
    if (ev.replay) {
      ++a.replay_events;
      a.replayed.insert(a.replayed.end(), ev.tokens.begin(), ev.tokens.end());
      a.replayed_text += ev.text;
      EXPECT_TRUE(ev.logprobs.empty());
      continue;
    }
    a.tokens.insert(a.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    a.text += ev.text;
  }
}

void ExpectResumesEverywhere(Engine& engine, const RequestSpec& spec, const char* what) {
  const Answer whole = RunAnswer(engine, spec);
  ASSERT_FALSE(whole.tokens.empty()) << what;
  EXPECT_EQ(whole.replay_events, 0) << what;
  for (size_t k = 0; k <= whole.tokens.size(); ++k) {
    RequestSpec resumed = spec;
    resumed.resumed.assign(whole.tokens.begin(), whole.tokens.begin() + ptrdiff_t(k));
    const Answer rest = RunAnswer(engine, resumed);
    SCOPED_TRACE(std::string(what) + ", resumed after " + std::to_string(k) + " of " +
                 std::to_string(whole.tokens.size()) + " tokens");
    EXPECT_EQ(rest.replay_events, k > 0 ? 1 : 0);
    EXPECT_EQ(rest.replayed, resumed.resumed);
    std::vector<int32_t> all = rest.replayed;
    all.insert(all.end(), rest.tokens.begin(), rest.tokens.end());
    EXPECT_EQ(all, whole.tokens);
    EXPECT_EQ(rest.replayed_text + rest.text, whole.text);
    EXPECT_EQ(rest.finish, whole.finish);
    EXPECT_EQ(rest.prompt_tokens, whole.prompt_tokens);
    EXPECT_EQ(rest.completion_tokens, whole.completion_tokens);
    if (::testing::Test::HasFailure()) return;  // one point's story is enough
  }
}

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = MakePresetModel("tiny", TensorType::kF32);
    EngineOptions opt;
    opt.cache_tokens = 64 * 200;
    opt.chunk_size = 24;  // resumed prompts take several steps
    auto engine = Engine::Create(*model_->model, opt);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    engine_ = std::move(engine).value();
  }
  RequestSpec Spec(uint32_t seed, int32_t max_tokens) const {
    RequestSpec s;
    s.prompt = PseudoRandomTokens(37, model_->model->config().vocab_size, seed);
    s.max_tokens = max_tokens;
    s.ignore_eos = true;
    return s;
  }
  // Sampled under a small JSON schema (an object, an array of enums in it).
  RequestSpec SchemaSpec() const {
    RequestSpec s = Spec(4, 40);
    s.sampling.temperature = 0.9f;
    s.sampling.seed = 5;
    s.sampling.constraint = R"(json_schema {"type": "object", "properties": {"a": {"type": "integer"},
      "b": {"type": "array", "items": {"enum": ["x", "yy", 3]}, "maxItems": 3}}, "required": ["a", "b"],
      "additionalProperties": false})";
    return s;
  }
  std::unique_ptr<testing::InMemoryModel> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(Resume, GreedyAndSampledWithPenaltiesGoOnAsTheyWould) {
  RequestSpec greedy = Spec(1, 20);
  ExpectResumesEverywhere(*engine_, greedy, "greedy");
  RequestSpec sampled = Spec(2, 20);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_k = 40;
  sampled.sampling.seed = 1234;
  sampled.sampling.frequency_penalty = 0.7f;  // counts the resumed tokens as generated
  sampled.sampling.presence_penalty = 0.3f;
  ExpectResumesEverywhere(*engine_, sampled, "sampled with penalties");
}

TEST_F(Resume, StopStringsAndEndOfGenerationEndItWhereTheyWould) {
  // The model's own text, cut by a stop string two tokens into it.
  RequestSpec probe = Spec(3, 24);
  probe.sampling.temperature = 0.8f;
  probe.sampling.seed = 99;
  const Answer whole = RunAnswer(*engine_, probe);
  ASSERT_GE(whole.text.size(), 8u);
  RequestSpec stopped = probe;
  stopped.stop = {whole.text.substr(whole.text.size() / 2, 3)};
  ExpectResumesEverywhere(*engine_, stopped, "stop string");
  const Answer cut = RunAnswer(*engine_, stopped);
  EXPECT_EQ(cut.finish, "stop");
  RequestSpec eos = probe;
  eos.ignore_eos = false;
  ExpectResumesEverywhere(*engine_, eos, "end of generation");
}

TEST_F(Resume, TheGrammarGoesOnFromTheResumedTokens) {
  const RequestSpec s = SchemaSpec();
  ExpectResumesEverywhere(*engine_, s, "json schema");
}

TEST_F(Resume, ResumedTokensAreCheckedAndCountAgainstTheContext) {
  RequestSpec s = Spec(5, 8);
  s.resumed = {0, int32_t(model_->model->config().vocab_size)};
  EXPECT_EQ(engine_->Submit(s).status().code(), StatusCode::kInvalidArgument);
  s.resumed.assign(size_t(engine_->context_tokens()), 1);
  EXPECT_EQ(engine_->Submit(s).status().code(), StatusCode::kInvalidArgument);
  // An answer already at max_tokens ends at once, with nothing more drawn.
  s.resumed = {3, 4, 5, 6, 7, 8, 9, 10};
  const Answer full = RunAnswer(*engine_, s);
  EXPECT_EQ(full.finish, "length");
  EXPECT_TRUE(full.tokens.empty());
  EXPECT_EQ(full.completion_tokens, 8);
}

// Replayed in slices as small as one token a pass, an answer goes on as it
// would: what a slice boundary could change (the text decoder's partial
// characters, a stop string across it, the grammar's state) it does not.
TEST_F(Resume, ReplayedOneTokenAPassItGoesOnAsItWould) {
  EngineOptions opt;
  opt.cache_tokens = 64 * 200;
  opt.chunk_size = 24;
  opt.replay_tokens_per_pass = 1;
  auto made = Engine::Create(*model_->model, opt);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  RequestSpec probe = Spec(9, 24);
  probe.sampling.temperature = 0.8f;
  probe.sampling.seed = 77;
  const Answer whole = RunAnswer(**made, probe);
  ASSERT_GE(whole.text.size(), 8u);
  RequestSpec stopped = probe;
  stopped.stop = {whole.text.substr(whole.text.size() / 2, 3)};
  ExpectResumesEverywhere(**made, stopped, "stop string, one token a pass");
  const RequestSpec s = SchemaSpec();
  ExpectResumesEverywhere(**made, s, "json schema, one token a pass");
}

// The heaviest replay a request can ask for (issue 41: a bystander waited
// 62.9 s behind it): sixteen choices resuming a whole context each, with 63
// stop strings of 127 bytes that never match and a grammar. Its tokens are
// replayed a slice at a time (replay_tokens_per_pass, all requests together),
// so a bystander's request runs its steps while the replay is under way, and
// no pass of the loop replays more than its share. The answers are the ones
// a replay in one piece gave (the other Resume tests).
TEST_F(Resume, AWholeContextReplayTakesItsTurnsBesideOtherRequests) {
  EngineOptions opt;
  opt.cache_tokens = 64 * 200;
  opt.replay_tokens_per_pass = 16;
  auto made = Engine::Create(*model_->model, opt);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  Engine& engine = **made;
  RequestSpec bystander = Spec(7, 4);
  RequestSpec heavy = Spec(8, 0);
  heavy.prompt.resize(8);
  // A JSON string as long as the context: a quote, then one letter over and over.
  const Tokenizer& tok = model_->model->tokenizer();
  const std::vector<int32_t> quote = tok.Encode("\"", false, false), letter = tok.Encode("a", false, false);
  ASSERT_EQ(quote.size(), 1u);
  ASSERT_EQ(letter.size(), 1u);
  heavy.resumed = quote;
  heavy.resumed.resize(size_t(engine.context_tokens()) - heavy.prompt.size() - 1, letter[0]);
  heavy.max_tokens = int32_t(heavy.resumed.size());  // it ends when its replay does
  for (int i = 0; i < 63; ++i) heavy.stop.push_back("\x01" + std::string(126, char('a' + i % 26)));
  heavy.sampling.constraint = R"(json_schema {"type": "string"})";
  heavy.sampling.seed = 11;
  // The bystander after them: with the replay in one piece, its steps came
  // after all of it; in slices (a thousand passes) it runs beside.
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int c = 0; c < 16; ++c) {
    auto h = engine.Submit(heavy);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handles.push_back(*h);
  }
  auto by = engine.Submit(bystander);
  ASSERT_TRUE(by.ok()) << by.status().ToString();
  StreamEvent ev;
  int64_t by_tokens = 0;
  while ((*by)->Next(&ev, std::chrono::seconds(60)) && ev.kind == StreamEvent::Kind::kText) by_tokens += int64_t(ev.tokens.size());
  EXPECT_EQ(ev.kind, StreamEvent::Kind::kFinish) << ev.error.ToString();
  EXPECT_EQ(by_tokens, 4);
  for (auto& h : handles) {
    std::vector<int32_t> replayed;
    int replay_events = 0;
    while (h->Next(&ev, std::chrono::seconds(60)) && ev.kind == StreamEvent::Kind::kText) {
      ++replay_events;
      EXPECT_TRUE(ev.replay);
      replayed.insert(replayed.end(), ev.tokens.begin(), ev.tokens.end());
    }
    EXPECT_EQ(ev.kind, StreamEvent::Kind::kFinish) << ev.error.ToString();
    EXPECT_EQ(ev.finish, FinishReason::kLength);
    EXPECT_EQ(replay_events, 1);
    EXPECT_EQ(replayed, heavy.resumed);
  }
  const int64_t total = 16 * int64_t(heavy.resumed.size());
  ASSERT_TRUE(testing::WaitUntil([&] { return engine.Stats().replay_tokens == total; }, std::chrono::seconds(10)));
  const EngineStats st = engine.Stats();
  EXPECT_LT(st.replay_max_pass, 32) << "its share (16), and at most one token's walk past it";
  EXPECT_GE(st.steps_beside_replay, 2) << "the bystander's prompt and token waited for the whole replay";
}

}  // namespace
}  // namespace tandem
