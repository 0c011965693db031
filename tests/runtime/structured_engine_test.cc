// Structured outputs through the engine: constrained answers are the same
// bits alone and batched, every one is complete and valid (checked by
// python3-jsonschema), and penalties and logit_bias act on the sampler's input.
#include <gtest/gtest.h>

#include <fstream>

#include "runtime/engine.h"
#include "structured/json_schema.h"
#include "runtime/random_schema.h"
#include "support/process.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using testing::MakePresetModel;
using testing::PseudoRandomTokens;

struct Answer {
  std::vector<int32_t> tokens;
  std::string text, finish;
  bool error = false;
  std::string message;
};

Answer Drain(RequestHandle& h) {
  Answer a;
  StreamEvent ev;
  while (h.Next(&ev, std::chrono::seconds(120))) {
    if (ev.kind == StreamEvent::Kind::kText) {
      a.tokens.insert(a.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      a.text += ev.text;
      continue;
    }
    a.finish = FinishReasonName(ev.finish);
    a.error = ev.kind == StreamEvent::Kind::kError;
    a.message = ev.error.message();
    return a;
  }
  a.finish = "timeout";
  return a;
}

RequestSpec Constrained(std::vector<int32_t> prompt, const std::string& schema, int max_tokens, uint64_t seed) {
  RequestSpec s;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  s.sampling.temperature = 0.9f;
  s.sampling.seed = seed;
  s.sampling.constraint = "json_schema " + schema;
  s.sampling.answer_budget = max_tokens;
  return s;
}

std::unique_ptr<Engine> MakeEngine(const Model& model) {
  EngineOptions opt;
  opt.cache_tokens = 64 * 400;
  opt.max_running = 64;
  opt.max_waiting = 1024;
  auto e = Engine::Create(model, opt);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// The must-show: every constrained answer validates, and a request's answer
// does not depend on what it was batched with.
TEST(StructuredEngine, AnswersValidateAndAreTheSameAloneAndInABatchOf32) {
  if (testing::RunShell("python3 -c 'import jsonschema'", 30).exit_code != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: python3-jsonschema is not installed: the reference validator is missing";
  }
  auto m = MakePresetModel("tiny", TensorType::kF32);
  auto engine = MakeEngine(*m->model);
  ASSERT_NE(engine, nullptr);
  testing::RandomSchema schemas(21);
  std::vector<std::string> texts;
  std::vector<RequestSpec> specs;
  for (int i = 0; i < 500; ++i) {
    const std::string schema = schemas.Make().dump();
    auto g = CompileConstraint("json_schema " + schema);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    const int least = int((*g)->MinBytesToAccept((*g)->Start()));  // what the server demands of max_tokens
    specs.push_back(Constrained(PseudoRandomTokens(size_t(8 + i % 23), m->model->config().vocab_size, uint32_t(i)),
                                schema, least + i % 40, uint64_t(i)));
  }
  // The first 32 alone, one at a time.
  std::vector<Answer> alone;
  for (int i = 0; i < 32; ++i) {
    auto h = engine->Submit(specs[size_t(i)]);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    alone.push_back(Drain(**h));
  }
  // All 500 at once (the first 32 batched with the others).
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const RequestSpec& s : specs) {
    auto h = engine->Submit(s);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handles.push_back(*h);
  }
  const std::string dir = testing::MakeTempDir();
  std::ofstream cases(dir + "/cases.jsonl");
  int stopped = 0;
  for (size_t i = 0; i < handles.size(); ++i) {
    const Answer a = Drain(*handles[i]);
    ASSERT_FALSE(a.error) << a.message;
    if (i < alone.size()) { EXPECT_EQ(a.tokens, alone[i].tokens) << "request " << i << " batched differs from alone"; }
    stopped += a.finish == "stop";
    const nlohmann::json schema = nlohmann::json::parse(specs[i].sampling.constraint.substr(12));
    cases << nlohmann::json({{"schema", schema}, {"text", a.text}}).dump(-1, ' ', false,
                                                                           nlohmann::json::error_handler_t::replace)
          << "\n";
  }
  cases.close();
  const auto r = testing::RunShell("python3 " + std::string(TANDEM_SOURCE_DIR) + "/tests/runtime/validate_json.py < " +
                                       dir + "/cases.jsonl | grep -c '^ok$'",
                                   120);
  EXPECT_EQ(r.output, "500\n") << "answers the reference validator accepted; the rest:\n"
                               << testing::RunShell("python3 " + std::string(TANDEM_SOURCE_DIR) +
                                                        "/tests/runtime/validate_json.py < " + dir +
                                                        "/cases.jsonl | grep -v '^ok$' | head",
                                                    60)
                                      .output;
  EXPECT_GT(stopped, 0);
}

TEST(StructuredEngine, AnAnswerThatCannotFitFailsClearly) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  auto engine = MakeEngine(*m->model);
  ASSERT_NE(engine, nullptr);
  // 3 tokens cannot hold {"long_name":0}; the server refuses this at parse
  // time, and the engine, given it anyway, fails the request with why.
  auto h = engine->Submit(Constrained({1, 5, 6}, R"({"type":"object","properties":{"long_name":{"type":"integer"}},"required":["long_name"]})", 3, 1));
  ASSERT_TRUE(h.ok());
  const Answer a = Drain(**h);
  EXPECT_TRUE(a.error);
  EXPECT_NE(a.message.find("cannot be completed in the 3 tokens left"), std::string::npos) << a.message;
  // A schema the subset refuses fails the request by name.
  auto bad = engine->Submit(Constrained({1, 5, 6}, R"({"type":"string","format":"date"})", 30, 1));
  ASSERT_TRUE(bad.ok());
  const Answer b = Drain(**bad);
  EXPECT_TRUE(b.error);
  EXPECT_NE(b.message.find("'format'"), std::string::npos) << b.message;
}

// logit_bias of -100 on the greedy answer's first token moves the answer off
// it; +100 on another token makes that one the answer. A frequency penalty
// changes a greedy answer that repeats tokens, and at 0 changes nothing.
TEST(StructuredEngine, LogitBiasAndPenaltiesChangeWhatTheyShould) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  auto engine = MakeEngine(*m->model);
  ASSERT_NE(engine, nullptr);
  const auto prompt = PseudoRandomTokens(12, m->model->config().vocab_size, 77);
  auto run = [&](const SamplingParams& p) {
    RequestSpec s;
    s.prompt = prompt;
    s.max_tokens = 40;
    s.ignore_eos = true;
    s.sampling = p;
    auto h = engine->Submit(s);
    EXPECT_TRUE(h.ok());
    return Drain(**h).tokens;
  };
  const auto greedy = run({});
  ASSERT_EQ(greedy.size(), 40u);
  SamplingParams ban;
  ban.logit_bias = {{greedy[0], -100.0f}};
  EXPECT_NE(run(ban)[0], greedy[0]);
  SamplingParams force;
  force.logit_bias = {{300, 100.0f}};
  const auto forced = run(force);
  EXPECT_TRUE(std::all_of(forced.begin(), forced.end(), [](int32_t t) { return t == 300; }));
  SamplingParams zero;
  zero.frequency_penalty = 0.0f;
  zero.presence_penalty = 0.0f;
  EXPECT_EQ(run(zero), greedy);
  // The smallest bias (in steps of 0.5) that makes token 300 the whole greedy
  // answer; a penalty of 2 on what was generated must then break the run.
  const auto count = [](const std::vector<int32_t>& v) { return std::count(v.begin(), v.end(), 300); };
  SamplingParams penalized;
  float bias = 0.0f;
  for (; bias <= 100.0f; bias += 0.5f) {
    penalized.logit_bias = {{300, bias}};
    if (count(run(penalized)) == 40) break;
  }
  ASSERT_LE(bias, 100.0f);
  penalized.frequency_penalty = 2.0f;
  const auto with_frequency = run(penalized);
  EXPECT_EQ(with_frequency[0], 300) << "nothing was generated yet: no penalty on the first token";
  EXPECT_LT(count(with_frequency), 40) << "the frequency penalty did not break the repeats";
  penalized.frequency_penalty = 0.0f;
  penalized.presence_penalty = 2.0f;
  EXPECT_LT(count(run(penalized)), 40) << "the presence penalty did not break the repeats";
}

}  // namespace
}  // namespace tandem
