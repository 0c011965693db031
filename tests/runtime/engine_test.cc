// The continuous-batching engine against the single-sequence generator: every
// request's tokens are bitwise what it would get alone, under concurrency,
// chunked prefill, preemption, prefix hits and cancellation.
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "runtime/generator.h"
#include "support/test_models.h"
#include "support/wait.h"

namespace tandem {
namespace {

using testing::MakePresetModel;
using testing::PseudoRandomTokens;

struct Outcome {
  std::vector<int32_t> tokens;
  std::string text, finish;
  int64_t cached = 0;
  bool error = false;
};

Outcome Drain(RequestHandle& h) {
  Outcome o;
  StreamEvent ev;
  while (h.Next(&ev, std::chrono::seconds(60))) {
    if (ev.kind == StreamEvent::Kind::kText) {
      o.tokens.insert(o.tokens.end(), ev.tokens.begin(), ev.tokens.end());
      o.text += ev.text;
    } else {
      o.finish = FinishReasonName(ev.finish);
      o.cached = ev.cached_prompt_tokens;
      o.error = ev.kind == StreamEvent::Kind::kError;
      return o;
    }
  }
  o.finish = "timeout";
  return o;
}

std::vector<int32_t> Alone(const Model& model, const std::vector<int32_t>& prompt, int max_tokens,
                           const SamplingParams& sampling = {}, bool ignore_eos = false) {
  ThreadPool threads(2);
  Generator gen(model, *MakeCacheSpec(model.config()), threads, 4096);
  GenerateOptions opt;
  opt.max_tokens = max_tokens;
  opt.sampling = sampling;
  opt.ignore_eos = ignore_eos;
  auto r = gen.Run(prompt, opt, nullptr);
  EXPECT_TRUE(r.ok());
  return r->tokens;
}

RequestSpec Spec(std::vector<int32_t> prompt, int max_tokens) {
  RequestSpec s;
  s.prompt = std::move(prompt);
  s.max_tokens = max_tokens;
  return s;
}

void WaitIdle(const Engine& e) {
  EXPECT_TRUE(testing::WaitUntil([&] { return e.Stats().running == 0 && e.Stats().waiting == 0; },
                                 std::chrono::seconds(10)))
      << "the engine did not become idle";
}

TEST(Engine, ConcurrentRequestsMatchSingleRequestResults) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  EngineOptions opt;
  opt.cache_tokens = 64 * 200;
  opt.chunk_size = 40;         // several prefill steps per prompt
  opt.max_batch_tokens = 128;  // prefill chunks and decode tokens share steps
  auto engine = Engine::Create(*m->model, opt);
  ASSERT_TRUE(engine.ok());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 32; ++i) {
    prompts.push_back(PseudoRandomTokens(size_t(5 + i * 7), m->model->config().vocab_size, uint32_t(i)));
    auto h = (*engine)->Submit(Spec(prompts.back(), 12 + i % 5));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handles.push_back(*h);
  }
  for (int i = 0; i < 32; ++i) {
    const Outcome o = Drain(*handles[size_t(i)]);
    const auto alone = Alone(*m->model, prompts[size_t(i)], 12 + i % 5);
    EXPECT_EQ(o.finish, int(alone.size()) == 12 + i % 5 ? "length" : "stop") << i;
    EXPECT_EQ(o.tokens, alone) << "request " << i;
  }
  WaitIdle(**engine);
  const EngineStats s = (*engine)->Stats();
  EXPECT_EQ(s.requests_finished, 32);
  EXPECT_EQ(s.pages.used, s.cached_pages) << "only the prefix index holds pages when idle";
  EXPECT_EQ(s.pages.reserved, 0);
}

// logprobs: each generated token's entry is the log-softmax of exactly the
// logits that token was drawn from (teacher-forced through the forward pass
// here), the greedy token is the top alternative, and a request's logprobs
// are the same bits alone or batched with others.
// echo: every prompt token's logprob is the log-softmax of the logits at the
// position before it (teacher-forced in one pass), the first has none, the
// same bits alone or batched with other requests, and whatever the cache
// holds (the prompt is computed whole). max_tokens 0 asks for the prompt alone.
TEST(Engine, PromptLogprobsAreTheTeacherForcedLogSoftmaxAloneOrBatched) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const Model& model = *m->model;
  const auto prompt = PseudoRandomTokens(90, model.config().vocab_size, 6);
  EngineOptions opt;
  opt.cache_tokens = 64 * 64;
  opt.chunk_size = 32;
  auto engine = Engine::Create(model, opt);
  ASSERT_TRUE(engine.ok());
  auto echo = [&](int others, int32_t max_tokens) {
    std::vector<std::shared_ptr<RequestHandle>> noise;
    for (int i = 0; i < others; ++i) {
      noise.push_back(*(*engine)->Submit(Spec(PseudoRandomTokens(size_t(12 + 7 * i), model.config().vocab_size, 70 + i), 6)));
    }
    RequestSpec spec = Spec(prompt, max_tokens);
    spec.sampling.temperature = 0;
    spec.logprobs = 3;
    spec.prompt_logprobs = true;
    auto h = (*engine)->Submit(spec);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    std::vector<PositionLogprobs> lps;
    int64_t generated = 0;
    StreamEvent ev;
    while ((*h)->Next(&ev, std::chrono::seconds(60)) && ev.kind == StreamEvent::Kind::kText) {
      if (!ev.prompt_logprobs.empty()) {
        EXPECT_TRUE(lps.empty()) << "prompt logprobs come once";
        EXPECT_TRUE(ev.tokens.empty() && ev.text.empty());
        lps = ev.prompt_logprobs;
      }
      generated += int64_t(ev.tokens.size());
    }
    EXPECT_EQ(ev.kind, StreamEvent::Kind::kFinish);
    EXPECT_EQ(ev.completion_tokens, generated);
    EXPECT_EQ(ev.cached_prompt_tokens, 0) << "the prompt is computed whole";
    for (auto& n : noise) Drain(*n);
    return std::make_pair(lps, generated);
  };
  const auto [alone, generated] = echo(0, 3);
  EXPECT_EQ(generated, 3);
  ASSERT_EQ(alone.size(), prompt.size());
  EXPECT_FALSE(alone[0].has_logprob);
  EXPECT_EQ(alone[0].chosen.token, prompt[0]);
  ThreadPool threads(2);
  const auto logits = testing::RunSequence(model, threads, prompt, 0);
  const size_t vocab = size_t(model.config().vocab_size);
  for (size_t k = 1; k < prompt.size(); ++k) {
    const PositionLogprobs want = ComputeLogprobs(std::span<const float>(logits.data() + (k - 1) * vocab, vocab), prompt[k], 3);
    ASSERT_TRUE(alone[k].has_logprob);
    EXPECT_EQ(alone[k].chosen.token, prompt[k]);
    EXPECT_EQ(alone[k].chosen.logprob, want.chosen.logprob) << "prompt token " << k;
    ASSERT_EQ(alone[k].top.size(), 3u);
    for (size_t t = 0; t < 3; ++t) EXPECT_EQ(alone[k].top[t].logprob, want.top[t].logprob);
  }
  // Again, now that the prefix cache holds this prompt, batched with 6 others, and with no generation.
  const auto [batched, none] = echo(6, 0);
  EXPECT_EQ(none, 0);
  ASSERT_EQ(batched.size(), alone.size());
  for (size_t k = 1; k < alone.size(); ++k) {
    EXPECT_EQ(batched[k].chosen.logprob, alone[k].chosen.logprob) << k;
  }
}

TEST(Engine, LogprobsAreTheLogSoftmaxOfTheTokensLogitsAloneOrBatched) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const Model& model = *m->model;
  const auto prompt = PseudoRandomTokens(70, model.config().vocab_size, 5);
  auto run = [&](int others) {
    EngineOptions opt;
    opt.cache_tokens = 64 * 64;
    opt.chunk_size = 32;
    auto engine = Engine::Create(model, opt);
    EXPECT_TRUE(engine.ok());
    std::vector<std::shared_ptr<RequestHandle>> noise;
    for (int i = 0; i < others; ++i) {
      noise.push_back(*(*engine)->Submit(Spec(PseudoRandomTokens(size_t(10 + 9 * i), model.config().vocab_size, 50 + i), 9)));
    }
    RequestSpec spec = Spec(prompt, 10);
    spec.sampling.temperature = 0;
    spec.logprobs = 4;
    auto h = (*engine)->Submit(spec);
    EXPECT_TRUE(h.ok());
    std::vector<int32_t> tokens;
    std::vector<PositionLogprobs> lps;
    StreamEvent ev;
    while ((*h)->Next(&ev, std::chrono::seconds(60)) && ev.kind == StreamEvent::Kind::kText) {
      EXPECT_EQ(ev.logprobs.size(), ev.tokens.size());
      tokens.insert(tokens.end(), ev.tokens.begin(), ev.tokens.end());
      lps.insert(lps.end(), ev.logprobs.begin(), ev.logprobs.end());
    }
    for (auto& n : noise) Drain(*n);
    return std::make_pair(tokens, lps);
  };
  const auto [tokens, alone] = run(0);
  ASSERT_EQ(tokens.size(), 10u);
  ASSERT_EQ(alone.size(), 10u);
  // The logits each token was drawn from, teacher-forced in one pass.
  std::vector<int32_t> seq = prompt;
  seq.insert(seq.end(), tokens.begin(), tokens.end() - 1);
  ThreadPool threads(2);
  const auto logits = testing::RunSequence(model, threads, seq, 0);
  const size_t vocab = size_t(model.config().vocab_size);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::span<const float> row(logits.data() + (prompt.size() - 1 + i) * vocab, vocab);
    const PositionLogprobs want = ComputeLogprobs(row, tokens[i], 4);
    EXPECT_EQ(alone[i].chosen.token, tokens[i]);
    EXPECT_EQ(alone[i].chosen.logprob, want.chosen.logprob) << "token " << i;
    ASSERT_EQ(alone[i].top.size(), 4u);
    EXPECT_EQ(alone[i].top[0].token, tokens[i]) << "greedy picks the most likely token";
    EXPECT_EQ(alone[i].top[0].logprob, alone[i].chosen.logprob);
    for (size_t k = 0; k < 4; ++k) {
      EXPECT_EQ(alone[i].top[k].token, want.top[k].token);
      EXPECT_EQ(alone[i].top[k].logprob, want.top[k].logprob);
      if (k > 0) {
        EXPECT_LE(alone[i].top[k].logprob, alone[i].top[k - 1].logprob);
      }
    }
    // A distribution: the probabilities of all tokens sum to 1.
    double total = 0;
    for (size_t t = 0; t < vocab; ++t) total += std::exp(double(ComputeLogprobs(row, int32_t(t), 0).chosen.logprob));
    EXPECT_NEAR(total, 1.0, 1e-4);
  }
  const auto [batched_tokens, batched] = run(7);
  EXPECT_EQ(batched_tokens, tokens);
  ASSERT_EQ(batched.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    EXPECT_EQ(batched[i].chosen.logprob, alone[i].chosen.logprob) << "token " << i << " batched";
    for (size_t k = 0; k < alone[i].top.size(); ++k) EXPECT_EQ(batched[i].top[k].logprob, alone[i].top[k].logprob);
  }
}

TEST(Engine, PreemptionUnderMemoryPressureKeepsResultsExact) {
  auto m = MakePresetModel("tiny", TensorType::kF16);
  EngineOptions opt;
  opt.cache_tokens = 64 * 10;  // 10 pages for 6 sequences of ~2-3 pages each
  opt.max_running = 6;
  auto engine = Engine::Create(*m->model, opt);
  ASSERT_TRUE(engine.ok());
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.seed = 5;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 6; ++i) {
    prompts.push_back(PseudoRandomTokens(size_t(60 + i * 10), m->model->config().vocab_size, uint32_t(50 + i)));
    RequestSpec spec = Spec(prompts.back(), 80);
    spec.sampling = sampled;
    handles.push_back(*(*engine)->Submit(spec));
  }
  for (int i = 0; i < 6; ++i) {
    const Outcome o = Drain(*handles[size_t(i)]);
    EXPECT_EQ(o.tokens, Alone(*m->model, prompts[size_t(i)], 80, sampled)) << "request " << i;
  }
  WaitIdle(**engine);
  EXPECT_GT((*engine)->Stats().preemptions, 0) << "the cache was sized to force preemption";
  EXPECT_EQ((*engine)->Stats().pages.used, (*engine)->Stats().cached_pages);
}

TEST(Engine, SecondTurnHitsThePrefixCacheWithIdenticalTokens) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  auto engine = Engine::Create(*m->model, EngineOptions{});
  ASSERT_TRUE(engine.ok());
  auto turn1 = PseudoRandomTokens(150, m->model->config().vocab_size, 9);
  const Outcome first = Drain(**(*engine)->Submit(Spec(turn1, 20)));
  auto turn2 = turn1;
  turn2.insert(turn2.end(), first.tokens.begin(), first.tokens.end());
  const auto more = PseudoRandomTokens(30, m->model->config().vocab_size, 10);
  turn2.insert(turn2.end(), more.begin(), more.end());
  const Outcome second = Drain(**(*engine)->Submit(Spec(turn2, 20)));
  // To the token: every token turn 1 computed (its prompt and all but the
  // last of its answer: two full pages and 41 rows of a partial one).
  const int64_t computed = int64_t(turn1.size() + first.tokens.size()) - 1;
  ASSERT_GT(computed, 128);
  EXPECT_EQ(second.cached, computed) << "turn 1's cache was reused to the token";
  EXPECT_EQ(second.tokens, Alone(*m->model, turn2, 20));
  EXPECT_EQ((*engine)->Stats().prefix_hit_tokens, computed);
  // A third turn that shares only part of that partial page reuses that part.
  auto turn3 = std::vector<int32_t>(turn2.begin(), turn2.begin() + 140);
  turn3.push_back(int32_t((turn2[140] + 1) % m->model->config().vocab_size));
  const auto tail = PseudoRandomTokens(10, m->model->config().vocab_size, 11);
  turn3.insert(turn3.end(), tail.begin(), tail.end());
  const Outcome third = Drain(**(*engine)->Submit(Spec(turn3, 8)));
  EXPECT_EQ(third.cached, 140);
  EXPECT_EQ(third.tokens, Alone(*m->model, turn3, 8));
  WaitIdle(**engine);
  EXPECT_EQ((*engine)->Stats().pages.used, (*engine)->Stats().cached_pages) << "no page leaked";
}

TEST(Engine, CancellingHalfLeavesNoLeaksAndTheRestComplete) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  EngineOptions opt;
  opt.cache_tokens = 64 * 80;
  auto engine = Engine::Create(*m->model, opt);
  ASSERT_TRUE(engine.ok());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (int i = 0; i < 32; ++i) {
    prompts.push_back(PseudoRandomTokens(size_t(20 + i), m->model->config().vocab_size, uint32_t(300 + i)));
    handles.push_back(*(*engine)->Submit(Spec(prompts.back(), 200)));
  }
  // Let every stream start, then cancel the even ones.
  for (int i = 0; i < 32; i += 2) {
    StreamEvent ev;
    ASSERT_TRUE(handles[size_t(i)]->Next(&ev, std::chrono::seconds(30)));
    handles[size_t(i)]->Cancel();
  }
  for (int i = 0; i < 32; ++i) {
    const Outcome o = Drain(*handles[size_t(i)]);
    if (i % 2 == 0) {
      EXPECT_EQ(o.finish, "cancelled") << i;
    } else {
      EXPECT_EQ(o.finish, "length") << i;
      EXPECT_EQ(o.tokens, Alone(*m->model, prompts[size_t(i)], 200)) << i;
    }
  }
  WaitIdle(**engine);
  const EngineStats s = (*engine)->Stats();
  EXPECT_EQ(s.requests_cancelled, 16);
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.pages.used, s.cached_pages);
}

TEST(Engine, RejectsWhatCannotRunAndRefusesWhenFull) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  EngineOptions opt;
  opt.context_tokens = 100;
  opt.max_waiting = 0;
  auto engine = Engine::Create(*m->model, opt);
  ASSERT_TRUE(engine.ok());
  auto too_long = (*engine)->Submit(Spec(PseudoRandomTokens(100, 1024, 1), 5));
  EXPECT_EQ(too_long.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("context holds 100"), std::string::npos);
  auto full = (*engine)->Submit(Spec({1, 2, 3}, 5));
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted);
  (*engine)->Shutdown(std::chrono::milliseconds(100));
  EXPECT_FALSE((*engine)->Healthy());
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(Engine, RequestsPastTheirDeadlineFailAndFreeTheirPages) {
  auto m = testing::MakePresetModel("tiny", TensorType::kF32);
  EngineOptions opt;
  opt.request_timeout = std::chrono::milliseconds(30);
  auto engine = Engine::Create(*m->model, opt);
  ASSERT_TRUE(engine.ok());
  RequestSpec spec;
  spec.prompt = testing::PseudoRandomTokens(40, 1024, 3);
  spec.max_tokens = 100000;
  spec.ignore_eos = true;
  auto h = (*engine)->Submit(spec);
  ASSERT_TRUE(h.ok());
  StreamEvent ev;
  bool failed = false;
  while ((*h)->Next(&ev, std::chrono::seconds(30))) {
    if (ev.kind == StreamEvent::Kind::kText) continue;
    failed = ev.kind == StreamEvent::Kind::kError;
    EXPECT_EQ(ev.error.code(), StatusCode::kDeadlineExceeded);
    EXPECT_NE(ev.error.message().find("deadline"), std::string::npos);
    break;
  }
  EXPECT_TRUE(failed);
  EXPECT_TRUE(testing::WaitUntil([&] { return (*engine)->Stats().running == 0; }, std::chrono::seconds(5),
                                 std::chrono::milliseconds(5)));
  const EngineStats s = (*engine)->Stats();
  EXPECT_EQ(s.requests_failed, 1);
  EXPECT_EQ(s.pages.used, s.cached_pages);
}

// Which prompts' chunks a step serves: in arrival order, a short prompt
// waits for the long ones that came before it; shortest-first serves the
// oldest, then the short one ahead of a long one that came before it. The
// order of first tokens is read where the engine pushes them.
TEST(Engine, PrefillOrderArrivalServesPromptsInTurnShortestLetsAShortOneAhead) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  for (PrefillOrder order : {PrefillOrder::kArrival, PrefillOrder::kShortestFirst}) {
    EngineOptions opt;
    opt.cache_tokens = 64 * 100;
    opt.chunk_size = 16;
    opt.max_batch_tokens = 32;  // two prompt chunks per step
    opt.prefill_order = order;
    opt.prefix_cache = false;
    auto engine = Engine::Create(*m->model, opt);
    ASSERT_TRUE(engine.ok());
    const int vocab = int(m->model->config().vocab_size);
    // A and B: long (94 and 63 chunks); C: short (2 chunks).
    const std::vector<int32_t> prompts[3] = {PseudoRandomTokens(1500, vocab, 1), PseudoRandomTokens(1000, vocab, 2),
                                             PseudoRandomTokens(20, vocab, 3)};
    Mutex mu;
    std::vector<int> first_tokens;  // request indices, in the order their first event was pushed
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (int i = 0; i < 3; ++i) {
      auto h = (*engine)->Submit(Spec(prompts[i], 1));
      ASSERT_TRUE(h.ok());
      handles.push_back(*h);
      handles.back()->SetListener([&mu, &first_tokens, i] {
        MutexLock lock(mu);
        if (std::find(first_tokens.begin(), first_tokens.end(), i) == first_tokens.end()) first_tokens.push_back(i);
      });
    }
    for (auto& h : handles) EXPECT_EQ(Drain(*h).finish, "length");
    for (auto& h : handles) h->SetListener(nullptr);
    MutexLock lock(mu);
    const std::vector<int> expected = order == PrefillOrder::kArrival ? std::vector<int>{1, 2, 0} : std::vector<int>{2, 1, 0};
    EXPECT_EQ(first_tokens, expected) << (order == PrefillOrder::kArrival ? "arrival" : "shortest");
  }
}


// A long prompt arriving while a sequence decodes: with a step-time budget its
// chunks are sized so the decoding sequence keeps drawing tokens through it
// (here the bound is below any step's cost, so every step carries the
// budget's minimum of 64 prompt tokens); without one, the whole prompt rides
// in one step and the decoding sequence waits for it. Either way every token
// is the one it gets alone (invariant 5).
TEST(Engine, StepTimeBudgetKeepsDecodingThroughALongPromptResultsUnchanged) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  const int vocab = int(m->model->config().vocab_size);
  const auto prompt_a = PseudoRandomTokens(40, vocab, 11), prompt_b = PseudoRandomTokens(2000, vocab, 12);
  for (int bounded = 0; bounded < 2; ++bounded) {
    EngineOptions opt;
    opt.cache_tokens = 64 * 100;
    opt.step_time = std::chrono::milliseconds(bounded ? 1 : 0);
    opt.prefix_cache = false;
    auto engine = Engine::Create(*m->model, opt);
    ASSERT_TRUE(engine.ok());
    RequestSpec spec_a = Spec(prompt_a, 400);
    spec_a.ignore_eos = true;
    auto a = (*engine)->Submit(spec_a);
    ASSERT_TRUE(a.ok());
    Mutex mu;
    int a_events = 0, a_events_before_b = -1;
    (*a)->SetListener([&] {
      MutexLock lock(mu);
      ++a_events;
    });
    ASSERT_TRUE(testing::WaitUntil([&] { MutexLock lock(mu); return a_events >= 2; }, std::chrono::seconds(30)));
    int a_events_at_b = 0;
    {
      MutexLock lock(mu);
      a_events_at_b = a_events;
    }
    auto b = (*engine)->Submit(Spec(prompt_b, 4));
    ASSERT_TRUE(b.ok());
    (*b)->SetListener([&] {
      MutexLock lock(mu);
      if (a_events_before_b < 0) a_events_before_b = a_events;
    });
    const Outcome oa = Drain(**a), ob = Drain(**b);
    (*a)->SetListener(nullptr);
    (*b)->SetListener(nullptr);
    EXPECT_EQ(oa.tokens.size(), 400u);
    EXPECT_EQ(oa.tokens, Alone(*m->model, prompt_a, 400, {}, true));
    EXPECT_EQ(ob.tokens, Alone(*m->model, prompt_b, 4));
    MutexLock lock(mu);
    const int during = a_events_before_b - a_events_at_b;
    std::printf("%s: %d of A's events between B's arrival and its first token\n", bounded ? "bounded" : "unbounded",
                during);
    if (bounded) {
      EXPECT_GE(during, 10) << "A's events while B's 2000-token prompt was computed in 64-token chunks";
      EXPECT_NE((*engine)->metrics().Text().find("tandem_step_prompt_budget_tokens 64"), std::string::npos);
      EXPECT_GT((*engine)->Stats().prompt_tokens, 0);
    } else {
      EXPECT_LE(during, 3) << "unbounded: B's prompt goes in one step";
    }
  }
}

// A colocated role whose Poll (on the loop thread) blocks while `held`: a
// step that takes as long as the test says.
class HoldingRole : public EngineRole {
 public:
  void Poll() override {
    std::unique_lock<std::mutex> lock(mu_);
    entered_ = true;
    entered_cv_.notify_all();
    released_cv_.wait(lock, [&] { return !held_; });
  }
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
    entered_ = false;
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> lock(mu_);
    return entered_cv_.wait_for(lock, std::chrono::seconds(30), [&] { return entered_; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    released_cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable entered_cv_, released_cv_;
  bool held_ = false, entered_ = false;
};

// Invariant 10: the loop's step age is part of health. A loop held in one
// pass past the watchdog's limit is unhealthy and says why; it is healthy
// again as soon as the pass ends. (Issue 41: a stalled server answered 200.)
TEST(Engine, ALoopStuckInOneStepIsUnhealthyUntilTheStepEnds) {
  auto m = MakePresetModel("tiny", TensorType::kF32);
  EngineOptions opt;
  opt.cache_tokens = 64 * 16;
  opt.loop_watchdog = std::chrono::milliseconds(1000);
  HoldingRole role;
  auto engine = Engine::Create(*m->model, opt, role);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  // (Waited for, not read once: a loaded machine may pause the idle loop.)
  EXPECT_TRUE(testing::WaitUntil([&] { return (*engine)->Healthy(); }, std::chrono::seconds(30)));
  role.Hold();
  ASSERT_TRUE(role.WaitEntered());
  ASSERT_TRUE(testing::WaitUntil([&] { return !(*engine)->Healthy(); }, std::chrono::seconds(30)));
  EXPECT_GT((*engine)->LoopStall().count(), 1000);
  EXPECT_NE((*engine)->StallNote().find("in one step for"), std::string::npos) << (*engine)->StallNote();
  EXPECT_FALSE((*engine)->Stats().healthy);
  role.Release();
  ASSERT_TRUE(testing::WaitUntil([&] { return (*engine)->Healthy() && (*engine)->StallNote().empty(); },
                                 std::chrono::seconds(30)));
  // And it serves: the stall ended nothing.
  auto h = (*engine)->Submit(Spec(PseudoRandomTokens(9, m->model->config().vocab_size, 3), 4));
  ASSERT_TRUE(h.ok());
  const Outcome o = Drain(**h);
  EXPECT_FALSE(o.error);
  EXPECT_TRUE(o.finish == "length" || o.finish == "stop") << o.finish;
}

}  // namespace
}  // namespace tandem
