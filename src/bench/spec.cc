#include "bench/spec.h"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "common/env.h"
#include "common/splitmix.h"
#include "common/thread_pool.h"
#include "model/forward.h"
#include "runtime/engine.h"

namespace tandem::bench {
namespace {

using namespace std::chrono_literals;

// Agent-like prompts: tool output, code and JSON that an answer re-reads.
std::vector<std::string> Prompts() {
  return {
      "Tool result: {\"files\": [\"src/main.cc\", \"src/util.cc\", \"src/util.h\"], \"status\": \"ok\"}. "
      "The files are src/main.cc, src/util.cc and src/util.h. Reading src/util.cc:",
      "def area(r):\n    return 3.14159 * r * r\n\ndef perimeter(r):\n    return 2 * 3.14159 * r\n\n"
      "def volume(r):\n    return",
      "Once upon a time, there was a little girl named Lily. She loved to play in the park. One day, Lily "
      "went to the park with her mom. Once upon a time,",
      "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"weather in Paris\"}}</tool_call>\n"
      "<tool_response>{\"city\": \"Paris\", \"temperature\": 18, \"sky\": \"cloudy\"}</tool_response>\n"
      "The weather in Paris:",
  };
}

// Benchmark-only: drafts the reference answer's own next tokens (those the
// draws will make), each replaced by a wrong one with probability
// 1 - acceptance, decided by its position: acceptance set, not found.
class SetAcceptanceDrafter {
 public:
  SetAcceptanceDrafter(std::vector<std::vector<int32_t>> references, double acceptance, int32_t vocab)
      : references_(std::move(references)), acceptance_(acceptance), vocab_(vocab) {}
  std::vector<int32_t> operator()(std::span<const int32_t> tokens, int32_t max_tokens) const {
    for (const std::vector<int32_t>& ref : references_) {
      if (ref.size() <= tokens.size() || !std::equal(tokens.begin(), tokens.end(), ref.begin())) continue;
      std::vector<int32_t> out;
      for (size_t p = tokens.size(); p < ref.size() && out.size() < size_t(max_tokens); ++p) {
        const double u = double(SplitMix64(uint64_t(p) * 0x2545f4914f6cdd1dull) >> 11) * 0x1p-53;
        out.push_back(u < acceptance_ ? ref[p] : (ref[p] + 1) % vocab_);
      }
      return out;
    }
    return {};
  }

 private:
  std::vector<std::vector<int32_t>> references_;  // prompt and answer
  double acceptance_;
  int32_t vocab_;
};

struct RunResult {
  std::vector<std::vector<int32_t>> answers;
  int64_t decoded = 0;  // tokens after each answer's first
  double seconds = 0;   // from each answer's first token to its last
  int64_t drafted = 0, accepted = 0;
  double tokens_per_second() const { return seconds > 0 ? double(decoded) / seconds : 0; }
  // Each verifying step gives its kept drafts and one drawn token.
  double tokens_per_step() const { return decoded > accepted ? double(decoded) / double(decoded - accepted) : 1; }
};

StatusOr<RunResult> RunAll(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                           const EngineOptions& options, int max_tokens) {
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, options));
  RunResult r;
  const Env& env = Env::Default();
  for (const std::vector<int32_t>& prompt : prompts) {  // one at a time: decoding alone, where drafts pay
    RequestSpec spec;
    spec.prompt = prompt;
    spec.max_tokens = max_tokens;
    spec.ignore_eos = true;
    TANDEM_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> h, engine->Submit(std::move(spec)));
    std::vector<int32_t> answer;
    StreamEvent ev;
    Env::time_point first{};
    while (h->Next(&ev, 300s) && ev.kind == StreamEvent::Kind::kText) {
      if (answer.empty()) first = env.Now();
      answer.insert(answer.end(), ev.tokens.begin(), ev.tokens.end());
    }
    if (ev.kind != StreamEvent::Kind::kFinish) return Internal("a request did not finish: " + ev.error.ToString());
    if (!answer.empty()) {
      r.seconds += env.SecondsSince(first);
      r.decoded += int64_t(answer.size()) - 1;
    }
    r.answers.push_back(std::move(answer));
  }
  const EngineStats s = engine->Stats();
  r.drafted = s.drafted_tokens;
  r.accepted = s.accepted_tokens;
  return r;
}

// Seconds of one forward pass over `positions` tokens of one sequence at
// `context` tokens of context, every position's logits (a verify step).
StatusOr<double> StepSeconds(const Model& m, ThreadPool& threads, int64_t context, int positions) {
  const ModelConfig& c = m.config();
  TANDEM_ASSIGN_OR_RETURN(const CacheSpec spec, MakeCacheSpec(c, AttentionOptions{}));
  PagePool pool(spec.registry, int(c.n_layers), (context + positions + kPageTokens - 1) / kPageTokens);
  TANDEM_ASSIGN_OR_RETURN(const std::vector<int32_t> pages, pool.Allocate(pool.total_pages()));
  ForwardPass fwd(m, spec, threads);
  std::vector<int32_t> tokens(size_t(context + positions));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 3) % size_t(c.vocab_size));
  std::vector<float> logits;
  for (int64_t start = 0; start < context; start += 512) {  // the context, once
    const size_t len = size_t(std::min<int64_t>(512, context - start));
    SequenceChunk piece{std::span<const int32_t>(tokens).subspan(size_t(start), len), start, pages, false};
    logits.clear();
    TANDEM_RETURN_IF_ERROR(fwd.Run({&piece, 1}, pool, &logits));
  }
  SequenceChunk step{std::span<const int32_t>(tokens).subspan(size_t(context), size_t(positions)), context, pages,
                     true};
  constexpr int kRepeat = 16;
  double best = 1e30;
  for (int round = 0; round < 3; ++round) {  // the best of three rounds of kRepeat passes
    const auto t0 = Env::Default().Now();
    for (int i = 0; i < kRepeat; ++i) {
      logits.clear();
      TANDEM_RETURN_IF_ERROR(fwd.Run({&step, 1}, pool, &logits));
    }
    best = std::min(best, Env::Default().SecondsSince(t0) / kRepeat);
  }
  pool.Release(pages);
  return best;
}

bool SameAnswers(const RunResult& a, const RunResult& b) { return a.answers == b.answers; }

// RunAll `repeat` times: the first run's answers and counts, the median time
// (this machine is shared: one run's time is noise).
StatusOr<RunResult> Measure(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                            const EngineOptions& options, int max_tokens, int repeat) {
  std::vector<double> seconds;
  RunResult first;
  for (int i = 0; i < repeat; ++i) {
    TANDEM_ASSIGN_OR_RETURN(RunResult r, RunAll(model, prompts, options, max_tokens));
    seconds.push_back(r.seconds);
    if (i == 0) first = std::move(r);
    if (i > 0 && r.answers != first.answers) return Internal("two runs of the same engine answered differently");
  }
  std::sort(seconds.begin(), seconds.end());
  first.seconds = seconds[seconds.size() / 2];
  return first;
}

}  // namespace

int RunSpecBench(const SpecBenchOptions& a) {
  auto loaded = a.model.Load();
  if (!loaded.ok()) return std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str()), 1;
  const Model& model = **loaded;
  const Tokenizer& tok = model.tokenizer();
  std::vector<std::vector<int32_t>> prompts;
  const std::vector<std::string> texts = Prompts();
  for (int i = 0; i < a.requests; ++i) prompts.push_back(tok.Encode(texts[size_t(i) % texts.size()], tok.add_bos(), false));
  EngineOptions eo;
  eo.threads = a.model.threads;
  eo.cache_tokens = 64 * 1024;
  eo.prefix_cache = false;  // each run computes its prompts alike
  int most = 1;
  for (int k : a.speculate) most = std::max(most, k);
  std::printf("tandem bench spec: %s, %d requests one at a time, %d tokens each (greedy), %d threads, medians of %d "
              "runs\n",
              model.config().name.c_str(), a.requests, a.max_tokens, a.model.threads, a.repeat);
  auto base = Measure(model, prompts, eo, a.max_tokens, a.repeat);
  if (!base.ok()) return std::fprintf(stderr, "error: %s\n", base.status().ToString().c_str()), 1;
  std::printf("\n%-26s | %10s | %10s | %8s | %8s | %s\n", "drafts", "acceptance", "tok/step", "tok/s", "speedup",
              "answers");
  std::printf("%-26s | %10s | %10.2f | %8.1f | %7.2fx | reference\n", "none", "-", 1.0, base->tokens_per_second(), 1.0);
  bool all_equal = true;
  auto row = [&](const char* label, const RunResult& r) {
    const bool equal = SameAnswers(r, *base);
    all_equal = all_equal && equal;
    const double acceptance = r.drafted > 0 ? double(r.accepted) / double(r.drafted) : 0;
    std::printf("%-26s | %9.1f%% | %10.2f | %8.1f | %7.2fx | %s\n", label, 100 * acceptance, r.tokens_per_step(),
                r.tokens_per_second(), r.tokens_per_second() / base->tokens_per_second(),
                equal ? "equal" : "DIFFERENT");
  };
  for (int k : a.speculate) {
    EngineOptions with = eo;
    with.speculate_tokens = k;
    auto r = Measure(model, prompts, with, a.max_tokens, a.repeat);
    if (!r.ok()) return std::fprintf(stderr, "error: %s\n", r.status().ToString().c_str()), 1;
    char label[64];
    std::snprintf(label, sizeof(label), "context n-gram, k=%d", k);
    row(label, *r);
  }
  // The curve: drafts of set acceptance (the benchmark's own proposer), at the largest k.
  std::vector<std::vector<int32_t>> references;
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> full = prompts[i];
    full.insert(full.end(), base->answers[i].begin(), base->answers[i].end());
    references.push_back(std::move(full));
  }
  for (double p : a.acceptance) {
    EngineOptions with = eo;
    with.speculate_tokens = most;
    with.drafter = SetAcceptanceDrafter(references, p, model.config().vocab_size);
    with.speculate_by_cost = false;  // the raw curve: every draft verified
    auto r = Measure(model, prompts, with, a.max_tokens, a.repeat);
    if (!r.ok()) return std::fprintf(stderr, "error: %s\n", r.status().ToString().c_str()), 1;
    char label[64];
    std::snprintf(label, sizeof(label), "set %.0f%% per token, k=%d", 100 * p, most);
    row(label, *r);
  }
  // The cost side: a verify step of 1 + k positions against a 1-position step.
  ThreadPool threads(a.model.threads);
  auto one = StepSeconds(model, threads, a.context, 1);
  if (!one.ok()) return std::fprintf(stderr, "error: %s\n", one.status().ToString().c_str()), 1;
  std::printf("\nverify step at %lld tokens of context: 1 position %.3f ms\n", (long long)a.context, *one * 1e3);
  for (int k : a.speculate) {
    auto t = StepSeconds(model, threads, a.context, 1 + k);
    if (!t.ok()) return std::fprintf(stderr, "error: %s\n", t.status().ToString().c_str()), 1;
    std::printf("  1 + %-2d positions %.3f ms: %.2fx the 1-position step\n", k, *t * 1e3, *t / *one);
  }
  if (!all_equal) {
    std::fprintf(stderr, "error: an answer with drafts differs from the answer without (invariant 5)\n");
    return 1;
  }
  return 0;
}

}  // namespace tandem::bench
