// Issue 26, "one structured-output request can slow every user": token masks
// were made on the engine loop, each bounded only per token, so n=16 choices
// of a recursive schema pushed into new states by their logit_bias added
// their mask work to every step of every request (on the tiny test model the
// other requests' inter-token p99 went from 4 ms to 24 ms; on a real
// vocabulary, seconds). Now a step's grammar work has a budget shared by the
// sequences that need a mask; a mask that needs more is finished in later
// steps with the same bits, and a mask past its own bound ends its request
// with a clear error.
#include "structured/grammar_budget.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "loadgen/grammar_load.h"
#include "runtime/engine.h"
#include "structured/json_schema.h"
#include "runtime/sampler.h"
#include "support/test_models.h"

namespace tandem {
namespace {

using testing::MakePresetModel;

struct Answer {
  std::vector<int32_t> tokens;
  std::string text;
  bool error = false;
  std::string message;
  std::vector<double> gaps_s;  // between two of its tokens, as the engine pushed them
};

// The answer, and when each of its token events was pushed (`pushed`, one
// entry per event from some point on: the listener was set after Submit).
Answer Drain(RequestHandle& h, const std::vector<std::chrono::steady_clock::time_point>& pushed) {
  Answer a;
  std::vector<bool> is_token;
  StreamEvent ev;
  while (h.Next(&ev, std::chrono::seconds(300))) {
    is_token.push_back(ev.kind == StreamEvent::Kind::kText && !ev.tokens.empty());
    if (ev.kind == StreamEvent::Kind::kText) {
      a.tokens.insert(a.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      a.text += ev.text;
      continue;
    }
    a.error = ev.kind == StreamEvent::Kind::kError;
    a.message = ev.error.message();
    h.SetListener(nullptr);  // waits out a call in progress: `pushed` is complete
    const size_t skip = is_token.size() - std::min(is_token.size(), pushed.size());
    std::optional<std::chrono::steady_clock::time_point> last;
    for (size_t i = skip; i < is_token.size(); ++i) {
      if (!is_token[i]) continue;
      const auto at = pushed[i - skip];
      if (last) a.gaps_s.push_back(std::chrono::duration<double>(at - *last).count());
      last = at;
    }
    return a;
  }
  a.error = true;
  a.message = "no end in time";
  return a;
}

RequestSpec WorstCase(const Tokenizer& tok, uint64_t seed) { return loadgen::GrammarWorstCase(tok, seed); }
RequestSpec Ordinary(const Tokenizer& tok, int i) { return loadgen::OrdinaryRequest(tok, i); }

std::unique_ptr<Engine> MakeEngine(const Model& model, int64_t grammar_work_per_step) {
  EngineOptions opt;
  opt.cache_tokens = 64 * 1200;
  opt.max_running = 32;
  opt.grammar_work_per_step = grammar_work_per_step;
  auto e = Engine::Create(model, opt);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// Submits every spec at once and reads every answer. Token times are taken
// on the engine's thread as it pushes them (a reader thread's wake-up on a
// busy machine would add its own delay).
std::vector<Answer> RunAll(Engine& engine, const std::vector<RequestSpec>& specs) {
  std::vector<std::shared_ptr<RequestHandle>> handles;
  std::vector<std::vector<std::chrono::steady_clock::time_point>> pushed(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    auto h = engine.Submit(specs[i]);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return {};
    (*h)->SetListener([times = &pushed[i]] { times->push_back(std::chrono::steady_clock::now()); });
    handles.push_back(*h);
  }
  std::vector<Answer> out;
  for (size_t i = 0; i < handles.size(); ++i) out.push_back(Drain(*handles[i], pushed[i]));
  return out;
}

double P99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(0.99 * double(v.size())))];
}

constexpr int64_t kBudget = int64_t(1) << 21;

TEST(GrammarBudget, OneStructuredRequestCannotSlowEveryOtherRequest) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const Tokenizer& tok = m->model->tokenizer();
  std::vector<RequestSpec> ordinary, worst;
  for (int i = 0; i < 8; ++i) ordinary.push_back(Ordinary(tok, i));
  for (uint64_t c = 0; c < 16; ++c) worst.push_back(WorstCase(tok, c));

  // The ordinary requests alone: their tokens, and how long they waited.
  auto alone_engine = MakeEngine(*m->model, kBudget);
  ASSERT_NE(alone_engine, nullptr);
  const std::vector<Answer> alone = RunAll(*alone_engine, ordinary);

  // The same beside the worst case, all submitted at once.
  auto engine = MakeEngine(*m->model, kBudget);
  ASSERT_NE(engine, nullptr);
  std::vector<RequestSpec> all = worst;
  all.insert(all.end(), ordinary.begin(), ordinary.end());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<Answer> beside = RunAll(*engine, all);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<double> gaps_alone, gaps_beside;
  for (size_t i = 0; i < ordinary.size(); ++i) {
    const Answer& a = beside[worst.size() + i];
    EXPECT_FALSE(a.error) << a.message;
    EXPECT_EQ(a.tokens, alone[i].tokens)
        << "ordinary request " << i << " changed beside the worst case";
    gaps_alone.insert(gaps_alone.end(), alone[i].gaps_s.begin(), alone[i].gaps_s.end());
    gaps_beside.insert(gaps_beside.end(), a.gaps_s.begin(), a.gaps_s.end());
  }
  int failed_clearly = 0;
  for (size_t c = 0; c < worst.size(); ++c) {
    const Answer& a = beside[c];
    EXPECT_TRUE(a.error) << "choice " << c << " should end with the work-budget error, got "
                         << a.tokens.size() << " tokens";
    failed_clearly +=
        a.message.find("structured-output grammar exceeded its per-step work budget") !=
        std::string::npos;
  }
  EXPECT_EQ(failed_clearly, 16) << beside[0].message;

  const EngineStats s = engine->Stats();
  EXPECT_LE(s.grammar_work_max_step, kBudget + GrammarBudget::MaxOvershoot())
      << "one step's grammar work passed the budget";
  EXPECT_GT(s.grammar_mask_waits, 0) << "the worst case should have needed more than its share";
  std::cout << "[ budget ] " << s.grammar_work << " units of grammar work, at most "
            << s.grammar_work_max_step << " in one step (budget " << kBudget << "), "
            << s.grammar_mask_waits
            << " draws waited for their mask; ordinary requests' inter-token p99 "
            << P99(gaps_beside) * 1e3 << " ms beside the worst case, " << P99(gaps_alone) * 1e3
            << " ms alone (reported, not asserted: the "
            << "machine is shared); " << wall << " s in all\n";

  // A worst-case choice alone: the same tokens up to its failure, the same
  // failure. Slicing its masks across steps changed when its tokens came,
  // never which.
  for (uint64_t c : {0, 7}) {
    auto solo = MakeEngine(*m->model, kBudget);
    ASSERT_NE(solo, nullptr);
    const std::vector<Answer> one = RunAll(*solo, {worst[c]});
    EXPECT_EQ(one[0].tokens, beside[c].tokens) << "choice " << c;
    EXPECT_EQ(one[0].message, beside[c].message) << "choice " << c;
  }
}

// The walk behind a mask stops between two advances and resumes: sliced
// finely, it gives the same masks (and the same failure, at the same work)
// as in one go, along a forced answer that ends past the work bound.
TEST(TokenConstraint, ASlicedMaskIsTheSameMask) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const Tokenizer& tok = m->model->tokenizer();
  const RequestSpec spec = WorstCase(tok, 3);
  ConstraintCache whole_cache(tok), sliced_cache(tok);
  auto whole = whole_cache.Start(spec.sampling.constraint);
  auto sliced = sliced_cache.Start(spec.sampling.constraint);
  ASSERT_TRUE(whole.ok() && sliced.ok());
  std::mt19937 rng(5);
  Sampler sampler;
  std::vector<float> logits(size_t(tok.vocab_size()));
  std::vector<int32_t> history;
  int positions = 0, most_slices = 0;
  for (; positions < 3000; ++positions) {
    const int64_t budget = 3000 - positions;
    int64_t whole_work = 0, sliced_work = 0;
    const TokenMask* a =
        (*whole)->Allowed(budget, std::numeric_limits<int64_t>::max(), &whole_work);
    const TokenMask* b = nullptr;
    int slices = 0;
    for (; slices < 100000 && b == nullptr && (*sliced)->status().ok(); ++slices) {
      b = (*sliced)->Allowed(budget, 20000, &sliced_work);
    }
    most_slices = std::max(most_slices, slices);
    ASSERT_EQ(a == nullptr, b == nullptr) << "position " << positions;
    EXPECT_EQ((*whole)->status().message(), (*sliced)->status().message());
    if (a == nullptr) break;
    ASSERT_EQ(*a, *b) << "position " << positions;
    EXPECT_EQ(whole_work, sliced_work) << "position " << positions;
    // Drawn as the engine would, from random logits under the worst case's
    // logit_bias: deeper, into new states.
    for (float& l : logits) l = std::normal_distribution<float>(0, 1)(rng);
    const int32_t t = sampler.Sample(logits, spec.sampling, history, positions, 0, a);
    history.push_back(t);
    (*whole)->Accept(t);
    (*sliced)->Accept(t);
  }
  EXPECT_GT(most_slices, 100) << "the slices were too large to test resuming";
  EXPECT_NE((*sliced)->status().message().find("exceeded its per-step work budget"),
            std::string::npos)
      << "after " << positions << " tokens: " << (*sliced)->status().message();
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

// The step's share of the model's time: once it has passed, a step does at
// most one slice (the walk that crosses it) and the rest wait; the masks
// that come out over the following steps are the masks made in one go.
TEST(GrammarBudget, PastItsTimeAStepDoesOneSliceAndLaterStepsFinishTheSameMasks) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const Tokenizer& tok = m->model->tokenizer();
  const RequestSpec spec = WorstCase(tok, 3);
  ConstraintCache cache(tok), reference_cache(tok);
  std::vector<std::unique_ptr<TokenConstraint>> walks;
  for (int i = 0; i < 4; ++i) {
    auto c = cache.Start(spec.sampling.constraint);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    walks.push_back(std::move(c).value());
  }
  auto reference = reference_cache.Start(spec.sampling.constraint);
  ASSERT_TRUE(reference.ok());
  // Deeper, '[' after '[', until a mask takes many slices (each walk in the
  // same state, its mask not yet made in their cache).
  const int32_t open = *tok.FindToken("[");
  const int64_t unlimited = std::numeric_limits<int64_t>::max();
  int64_t ref_work = 0;
  const TokenMask* want = nullptr;
  int depth = 0;
  for (; depth < 60; ++depth) {
    ref_work = 0;
    want = (*reference)->Allowed(3000 - depth, unlimited, &ref_work);
    ASSERT_NE(want, nullptr) << (*reference)->status().ToString();
    if (ref_work > 4 * GrammarBudget::kSlice) break;
    (*reference)->Accept(open);
    for (auto& w : walks) {
      int64_t work = 0;
      ASSERT_NE(w->Allowed(3000 - depth, unlimited, &work), nullptr);
      w->Accept(open);
    }
  }
  ASSERT_GT(ref_work, 4 * GrammarBudget::kSlice) << "the mask should take more than a few slices";

  GrammarBudget budget(int64_t(1) << 30);
  std::vector<GrammarBudget::Ask> asks;
  for (auto& w : walks) asks.push_back({w.get(), 3000 - depth});
  std::vector<std::optional<TokenMask>> got(asks.size());
  auto step = [&] {
    std::vector<GrammarBudget::Ask> open_asks;
    std::vector<size_t> which;
    for (size_t i = 0; i < asks.size(); ++i) {
      if (got[i]) continue;
      open_asks.push_back(asks[i]);
      which.push_back(i);
    }
    const int64_t work = budget.Run(open_asks, std::chrono::steady_clock::now() - std::chrono::seconds(1));
    for (size_t j = 0; j < which.size(); ++j) {
      if (open_asks[j].mask != nullptr) got[which[j]] = *open_asks[j].mask;
    }
    return work;
  };
  const int64_t late = step();
  EXPECT_GT(late, 0);
  EXPECT_LE(late, GrammarBudget::kSlice + GrammarBudget::MaxOvershoot());
  int steps = 1;
  auto pending = [&] { return std::any_of(got.begin(), got.end(), [](const auto& g) { return !g.has_value(); }); };
  while (pending() && steps < 100000) {
    EXPECT_LE(step(), GrammarBudget::kSlice + GrammarBudget::MaxOvershoot());
    ++steps;
  }
  ASSERT_FALSE(pending());
  for (const auto& g : got) EXPECT_EQ(*g, *want);
  std::cout << "[ budget ] " << ref_work << " units for the mask at depth " << depth << ": " << steps
            << " steps past their time (one slice each)\n";
}

}  // namespace
}  // namespace tandem
