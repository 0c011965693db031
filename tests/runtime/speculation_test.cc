// Speculative decoding from the sequence's own context: drafts change how
// many positions a step verifies, never a token (invariant 5). Every answer
// is compared, token for token, with the same request on an engine that does
// not speculate — greedy, seeded sampling with penalties, stop strings, short
// max_tokens, several sequences at once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/ngram_drafter.h"
#include "support/paths.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;

TEST(NgramDrafter, ProposesWhatFollowedTheMostRecentEarlierOccurrenceOfTheNewestTokens) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 1, 2, 3};
  // [1 2 3] occurs at 0 (then 4 5 9) and at 6 (then 7 8 1): the most recent wins.
  EXPECT_EQ(DraftFromContext(tokens, 3), (std::vector<int32_t>{7, 8, 1}));
  EXPECT_EQ(DraftFromContext(tokens, 1), (std::vector<int32_t>{7}));
  // Only what follows, up to the end of the context.
  const std::vector<int32_t> tail = {5, 6, 5, 6};
  EXPECT_EQ(DraftFromContext(tail, 8), (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(DraftFromContext(std::vector<int32_t>{1, 2, 3, 4, 5}, 4).empty()) << "no earlier occurrence";
  EXPECT_TRUE(DraftFromContext(tokens, 0).empty());
  // A match older than the window is not searched for.
  NgramDraftOptions narrow;
  narrow.window = 8;
  EXPECT_EQ(DraftFromContext(tokens, 3, narrow), (std::vector<int32_t>{7, 8, 1}));
  narrow.window = 6;
  EXPECT_TRUE(DraftFromContext(tokens, 3, narrow).empty());
  // The longest suffix is tried first: [9 1 2 3]'s occurrence beats [2 3]'s later one.
  const std::vector<int32_t> longest = {9, 1, 2, 3, 40, 2, 3, 50, 9, 1, 2, 3};
  EXPECT_EQ(DraftFromContext(longest, 1), (std::vector<int32_t>{40}));
}

struct Answer {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kError;
};

std::vector<Answer> Answers(Engine& engine, const std::vector<RequestSpec>& specs) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const RequestSpec& spec : specs) {
    auto h = engine.Submit(spec);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return {};
    handles.push_back(*h);
  }
  std::vector<Answer> out;
  for (auto& h : handles) {
    Answer a;
    StreamEvent ev;
    while (h->Next(&ev, 60s) && ev.kind == StreamEvent::Kind::kText) {
      a.tokens.insert(a.tokens.end(), ev.tokens.begin(), ev.tokens.end());
    }
    EXPECT_EQ(ev.kind, StreamEvent::Kind::kFinish) << ev.error.ToString();
    a.finish = ev.finish;
    out.push_back(std::move(a));
  }
  return out;
}

// The same requests on an engine without speculation and on one with it.
void ExpectSameAnswers(const Model& model, const std::vector<RequestSpec>& specs, int32_t speculate,
                       int64_t* drafted, int64_t* accepted, int64_t cache_tokens = 64 * 256,
                       int64_t* preemptions = nullptr) {
  EngineOptions plain;
  plain.threads = 2;
  plain.cache_tokens = cache_tokens;
  EngineOptions spec = plain;
  spec.speculate_tokens = speculate;
  spec.speculate_by_cost = false;  // these small models are compute-bound: by cost they would rarely draft
  auto a = Engine::Create(model, plain);
  auto b = Engine::Create(model, spec);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<Answer> want = Answers(**a, specs);
  const std::vector<Answer> got = Answers(**b, specs);
  ASSERT_EQ(want.size(), specs.size());
  ASSERT_EQ(got.size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i << " answered otherwise with speculation";
    EXPECT_EQ(got[i].finish, want[i].finish) << "request " << i;
  }
  // The next turn of each conversation, on the same engines: their prefix
  // caches hold what the first answers left (on the speculating engine, only
  // verified rows may be there, whatever ended an answer mid-draft).
  std::vector<RequestSpec> next = specs;
  for (size_t i = 0; i < next.size(); ++i) {
    next[i].prompt.insert(next[i].prompt.end(), want[i].tokens.begin(), want[i].tokens.end());
    next[i].prompt.insert(next[i].prompt.end(), specs[i].prompt.begin() + 1, specs[i].prompt.begin() + 6);
    next[i].max_tokens = std::min(next[i].max_tokens, 48);
  }
  const std::vector<Answer> want_next = Answers(**a, next);
  const std::vector<Answer> got_next = Answers(**b, next);
  ASSERT_EQ(got_next.size(), want_next.size());
  for (size_t i = 0; i < next.size(); ++i) {
    EXPECT_EQ(got_next[i].tokens, want_next[i].tokens) << "follow-up " << i << " answered otherwise with speculation";
  }
  EXPECT_GT((*b)->Stats().prefix_hit_tokens, 0) << "the follow-ups found nothing cached";
  const EngineStats s = (*b)->Stats();
  *drafted = s.drafted_tokens;
  *accepted = s.accepted_tokens;
  if (preemptions != nullptr) *preemptions = s.preemptions;
  EXPECT_EQ((*a)->Stats().drafted_tokens, 0);
  EXPECT_LE(s.accepted_tokens, s.drafted_tokens);
}

std::vector<RequestSpec> Mix(const Model& model) {
  const Tokenizer& tok = model.tokenizer();
  auto prompt = [&](const std::string& text) { return tok.Encode(text, tok.add_bos(), false); };
  std::vector<RequestSpec> specs;
  RequestSpec greedy;
  greedy.prompt = prompt("Once upon a time, there was a little girl. Once upon a time, there was a little");
  greedy.max_tokens = 160;
  greedy.ignore_eos = true;
  specs.push_back(greedy);
  RequestSpec sampled = greedy;  // seeded, with penalties: each draw a function of (seed, position, history)
  sampled.sampling.temperature = 0.8f;
  sampled.sampling.top_p = 0.95f;
  sampled.sampling.seed = 11;
  sampled.sampling.repetition_penalty = 1.1f;
  sampled.sampling.repeat_last_n = 32;
  specs.push_back(sampled);
  RequestSpec hot = greedy;
  hot.sampling.temperature = 1.0f;
  hot.sampling.seed = 3;
  specs.push_back(hot);
  RequestSpec stopped = greedy;  // ends inside a verified run of drafts
  stopped.stop = {"little"};
  specs.push_back(stopped);
  RequestSpec short_answer = greedy;  // max_tokens bounds the drafts
  short_answer.max_tokens = 3;
  specs.push_back(short_answer);
  RequestSpec eos = greedy;  // EOS ends it wherever the model says
  eos.ignore_eos = false;
  specs.push_back(eos);
  return specs;
}

TEST(Speculation, EveryAnswerIsTheSameTokensAsWithoutDraftsOnGeneratedModels) {
  int64_t drafted_all = 0, accepted_all = 0;
  for (const char* preset : {"tiny", "dsa-tiny"}) {
    auto model = testing::MakePresetModel(preset, TensorType::kF32);
    for (int32_t k : {1, 4, 8}) {
      int64_t drafted = 0, accepted = 0;
      ExpectSameAnswers(*model->model, Mix(*model->model), k, &drafted, &accepted);
      std::cout << "[ speculation ] " << preset << " k=" << k << ": drafted " << drafted << ", kept " << accepted
                << "\n";
      drafted_all += drafted;
      accepted_all += accepted;
    }
  }
  EXPECT_GT(drafted_all, 0) << "nothing was drafted: the test verified nothing";
  EXPECT_GT(accepted_all, 0) << "no draft was ever kept: the verified-run path was never taken";
}

// A cache too small for every sequence at once: sequences are preempted
// (some holding drafts: they compute their real tokens again) and resumed.
TEST(Speculation, PreemptedSequencesHoldingDraftsAnswerTheSameTokens) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  std::vector<RequestSpec> specs = Mix(*model->model);
  for (RequestSpec& s : specs) s.max_tokens = std::max(s.max_tokens, 120);
  int64_t drafted = 0, accepted = 0, preemptions = 0;
  ExpectSameAnswers(*model->model, specs, 4, &drafted, &accepted, /*cache_tokens=*/3 * 160, &preemptions);
  std::cout << "[ speculation ] tiny k=4, small cache: drafted " << drafted << ", kept " << accepted << ", "
            << preemptions << " preemptions\n";
  EXPECT_GT(preemptions, 0) << "the cache was large enough: nothing was preempted";
  EXPECT_GT(drafted, 0);
}

// An answer ended by a stop string whose last token is drawn where a draft
// was refused, with drafts still after it: only the verified rows may reach
// the prefix cache, or the next turn of the conversation reads a row computed
// for a token the answer does not have.
TEST(Speculation, AnAnswerStoppedMidDraftLeavesOnlyVerifiedRowsCached) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  const Model& m = *model->model;
  const Tokenizer& tok = m.tokenizer();
  EngineOptions plain;
  plain.threads = 2;
  auto a = Engine::Create(m, plain);
  ASSERT_TRUE(a.ok());
  RequestSpec first;
  first.prompt = tok.Encode("Once upon a time, there was a little girl", tok.add_bos(), false);
  first.max_tokens = 40;
  first.ignore_eos = true;
  const std::vector<Answer> free_run = Answers(**a, {first});
  ASSERT_EQ(free_run.size(), 1u);
  // A stop string that ends the answer at its 12th token or later: that token's text, first seen there.
  const std::vector<int32_t>& free_tokens = free_run[0].tokens;
  std::string stop;
  size_t stop_at = 0;
  for (size_t k = 12; k < free_tokens.size() && stop.empty(); ++k) {
    const std::string before = tok.Decode(std::span<const int32_t>(free_tokens).first(k));
    const std::string upto = tok.Decode(std::span<const int32_t>(free_tokens).first(k + 1));
    if (upto.size() < before.size() + 2) continue;
    const std::string piece = upto.substr(before.size());
    if (before.find(piece) == std::string::npos) stop = piece, stop_at = first.prompt.size() + k;
  }
  ASSERT_FALSE(stop.empty()) << "no token of the answer has text of its own to stop on";
  // Drafts of the answer itself, but a wrong token where the stop's token
  // goes: the step that draws it keeps the drafts before it, refuses that
  // one, and has drafts after it.
  std::vector<int32_t> reference = first.prompt;
  reference.insert(reference.end(), free_tokens.begin(), free_tokens.end());
  EngineOptions spec = plain;
  spec.speculate_tokens = 4;
  spec.speculate_by_cost = false;
  spec.drafter = [&](std::span<const int32_t> tokens, int32_t max_tokens) {
    std::vector<int32_t> out;
    for (size_t p = tokens.size(); p < reference.size() && out.size() < size_t(max_tokens); ++p) {
      out.push_back(p == stop_at ? (reference[p] + 1) % m.config().vocab_size : reference[p]);
    }
    return out;
  };
  auto b = Engine::Create(m, spec);
  ASSERT_TRUE(b.ok());
  first.stop = {stop};
  const std::vector<Answer> want = Answers(**a, {first});
  const std::vector<Answer> got = Answers(**b, {first});
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].tokens, want[0].tokens);
  ASSERT_EQ(got[0].finish, FinishReason::kStop);
  EXPECT_GT((*b)->Stats().accepted_tokens, 0);
  // The next turn: the answer and more text, which finds the answer's rows cached.
  RequestSpec next = first;
  next.stop.clear();
  next.prompt.insert(next.prompt.end(), want[0].tokens.begin(), want[0].tokens.end());
  const std::vector<int32_t> more = tok.Encode(" and then", false, false);
  next.prompt.insert(next.prompt.end(), more.begin(), more.end());
  next.max_tokens = 16;
  const std::vector<Answer> want_next = Answers(**a, {next});
  const std::vector<Answer> got_next = Answers(**b, {next});
  ASSERT_EQ(got_next.size(), 1u);
  EXPECT_EQ(got_next[0].tokens, want_next[0].tokens) << "the next turn read a row of a refused draft";
  EXPECT_GT((*b)->Stats().prefix_hit_tokens, 0) << "the next turn found nothing cached";
}

// By cost (the default), a compute-bound model drafts little or nothing; its
// answers are the same either way.
TEST(Speculation, ByCostTheAnswersAreTheSameToo) {
  auto model = testing::MakePresetModel("tiny", TensorType::kF32);
  EngineOptions plain;
  plain.threads = 2;
  EngineOptions by_cost = plain;
  by_cost.speculate_tokens = 4;
  auto a = Engine::Create(*model->model, plain);
  auto b = Engine::Create(*model->model, by_cost);
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<RequestSpec> specs = Mix(*model->model);
  const std::vector<Answer> want = Answers(**a, specs), got = Answers(**b, specs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  EXPECT_LE((*b)->Stats().accepted_tokens, (*b)->Stats().drafted_tokens);
}

TEST(Speculation, EveryAnswerIsTheSameTokensAsWithoutDraftsOnStories260K) {
  TANDEM_REQUIRE_SHARED_MODEL(path);
  auto model = Model::Load(path);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  int64_t drafted = 0, accepted = 0;
  ExpectSameAnswers(**model, Mix(**model), 6, &drafted, &accepted);
  std::cout << "[ speculation ] stories260K k=6: drafted " << drafted << ", kept " << accepted << "\n";
  EXPECT_GT(accepted, 0) << "a model trained on stories repeats itself; no draft was kept";
}

}  // namespace
}  // namespace tandem
