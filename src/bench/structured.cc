#include "bench/structured.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "loadgen/grammar_load.h"
#include "runtime/engine.h"
#include "structured/json_schema.h"

namespace tandem::bench {
namespace {

// Nested enough to revisit many grammar states; the budget closes it.
constexpr const char* kSchema = R"({"type":"object","properties":{
  "title":{"type":"string"},
  "items":{"type":"array","items":{"type":"object","properties":{
    "name":{"type":"string","maxLength":12},"score":{"type":"number"},"ok":{"type":"boolean"},
    "kind":{"enum":["alpha","beta",3,null]}},"required":["name","score","ok","kind"],"additionalProperties":false}},
  "note":{"anyOf":[{"type":"string","maxLength":20},{"type":"null"}]}},
  "required":["title","items","note"],"additionalProperties":false})";

struct ModeResult {
  int64_t tokens = 0, decode_tokens = 0, answers = 0, complete = 0, failed = 0;
  double wall_s = 0, decode_s = 0;
};

ModeResult RunMode(Engine& engine, const Model& model, const StructuredBenchOptions& a, const std::string& constraint) {
  const Tokenizer& tok = model.tokenizer();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Env::Default().Now();
  for (int i = 0; i < a.requests; ++i) {
    RequestSpec spec;
    spec.prompt = tok.Encode("Request " + std::to_string(i) + ": list the parts of a bicycle with a score for each.",
                             tok.add_bos(), false);
    spec.max_tokens = a.max_tokens;
    spec.sampling.temperature = 0.8f;
    spec.sampling.seed = uint64_t(i);
    spec.sampling.constraint = constraint;
    spec.sampling.answer_budget = a.max_tokens;
    spec.ignore_eos = constraint.empty();
    auto h = engine.Submit(std::move(spec));
    if (!h.ok()) {
      std::fprintf(stderr, "error: %s\n", h.status().ToString().c_str());
      return {};
    }
    handles.push_back(*h);
  }
  ModeResult r;
  for (auto& h : handles) {
    std::string text;
    int64_t n = 0;
    Clock::time_point first{};
    StreamEvent ev;
    for (;;) {
      if (!h->Next(&ev, std::chrono::milliseconds(100))) continue;  // the engine's deadline bounds this
      if (ev.kind != StreamEvent::Kind::kText) break;
      if (!ev.tokens.empty() && first == Clock::time_point{}) first = Env::Default().Now();
      n += int64_t(ev.tokens.size());
      text += ev.text;
    }
    const auto last = Env::Default().Now();
    ++r.answers;
    if (ev.kind == StreamEvent::Kind::kError) {
      ++r.failed;
      std::fprintf(stderr, "request failed: %s\n", ev.error.message().c_str());
      continue;
    }
    r.tokens += n;
    r.decode_tokens += std::max<int64_t>(0, n - 1);
    r.decode_s += std::chrono::duration<double>(last - first).count();
    if (!constraint.empty() && !nlohmann::json::parse(text, nullptr, false).is_discarded()) ++r.complete;
  }
  r.wall_s = std::chrono::duration<double>(Env::Default().Now() - t0).count();
  return r;
}

// --isolation: what the worst structured-output request does to everyone
// else. `ordinary` requests (loadgen::OrdinaryRequest) run alone, beside
// `beside` free-text streams, and beside `beside` choices of the grammar's
// worst case (loadgen::GrammarWorstCase), each on a fresh engine; their
// inter-token gaps are taken on the engine's thread as it pushes each token
// (a reader's wake-up would add its own delay).
struct IsolationResult {
  std::vector<double> gaps_s;  // the ordinary requests'
  int64_t beside_tokens = 0, beside_failed = 0;
  std::string beside_error;
  double wall_s = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(q * double(v.size())))];
}

IsolationResult RunIsolation(Engine& engine, const Model& model, const StructuredBenchOptions& a,
                             int kind /*0 alone, 1 free, 2 worst*/, uint64_t seed) {
  IsolationResult r;
  const Tokenizer& tok = model.tokenizer();
  using Clock = std::chrono::steady_clock;
  std::vector<std::shared_ptr<RequestHandle>> beside;
  for (int c = 0; kind > 0 && c < a.beside; ++c) {
    RequestSpec spec = loadgen::GrammarWorstCase(tok, seed + uint64_t(c));
    if (kind == 1) {
      spec.sampling.constraint.clear();
      spec.sampling.logit_bias.clear();
      spec.ignore_eos = true;
      spec.max_tokens = a.max_tokens * 2;
    }
    if (auto h = engine.Submit(std::move(spec)); h.ok()) beside.push_back(*h);
  }
  const auto t0 = Env::Default().Now();
  std::vector<std::shared_ptr<RequestHandle>> ordinary;
  std::vector<std::unique_ptr<std::vector<Clock::time_point>>> pushed;
  for (int i = 0; i < a.ordinary; ++i) {
    auto h = engine.Submit(loadgen::OrdinaryRequest(tok, i, a.max_tokens));
    if (!h.ok()) continue;
    pushed.push_back(std::make_unique<std::vector<Clock::time_point>>());
    (*h)->SetListener([times = pushed.back().get()] { times->push_back(Env::Default().Now()); });
    ordinary.push_back(*h);
  }
  for (size_t i = 0; i < ordinary.size(); ++i) {
    // Which pushes were tokens: the listener was set after Submit, so the
    // last pushed.size() events are the ones it saw.
    std::vector<bool> is_token;
    StreamEvent ev;
    while (ordinary[i]->Next(&ev, std::chrono::seconds(600))) {
      is_token.push_back(ev.kind == StreamEvent::Kind::kText && !ev.tokens.empty());
      if (ev.kind != StreamEvent::Kind::kText) break;
    }
    ordinary[i]->SetListener(nullptr);  // waits out a call in progress
    const auto& times = *pushed[i];
    const size_t skip = is_token.size() - std::min(is_token.size(), times.size());
    std::optional<Clock::time_point> last;
    for (size_t e = skip; e < is_token.size(); ++e) {
      if (!is_token[e]) continue;
      if (last) r.gaps_s.push_back(std::chrono::duration<double>(times[e - skip] - *last).count());
      last = times[e - skip];
    }
  }
  r.wall_s = std::chrono::duration<double>(Env::Default().Now() - t0).count();
  for (auto& h : beside) {
    StreamEvent ev;
    while (h->Next(&ev, std::chrono::seconds(600))) {
      if (ev.kind == StreamEvent::Kind::kText) {
        r.beside_tokens += int64_t(ev.tokens.size());
        continue;
      }
      if (ev.kind == StreamEvent::Kind::kError) {
        ++r.beside_failed;
        r.beside_error = ev.error.message();
      }
      break;
    }
  }
  return r;
}

int RunIsolationBench(const StructuredBenchOptions& a) {
  auto model = a.model.Load();
  if (!model.ok()) return 1;
  std::printf("isolation: %d ordinary requests (max_tokens %d; free text, every fourth a small schema) alone and "
              "beside %d choices; grammar work per step %lld and %.2f of the model's time; inter-token gaps as the engine pushed them\n\n",
              a.ordinary, a.max_tokens, a.beside, (long long)a.grammar_work_per_step, a.grammar_time_share);
  std::printf("%-22s %10s %10s %13s %14s %14s %8s\n", "beside", "ITL p50 ms", "ITL p99 ms", "p99 vs alone",
              "p99 vs free", "beside tokens", "wall s");
  std::printf("(medians of %d rounds; tokens and wall time in all)\n", a.rounds);
  // One engine for all three: warmed by the ordinary requests alone (their
  // schema's masks cached, as on a server that has run a while); the worst
  // case's choices draw seeds never used, so their states are new.
  EngineOptions eo;
  eo.threads = a.model.threads;
  eo.max_running = a.ordinary + a.beside;
  eo.max_waiting = eo.max_running + 1;
  eo.grammar_work_per_step = a.grammar_work_per_step;
  eo.grammar_time_share = a.grammar_time_share;
  auto engine = Engine::Create(**model, eo);
  if (!engine.ok()) return std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str()), 1;
  RunIsolation(**engine, **model, a, 0, 0);
  // Rounds of the three, interleaved, so a noisy moment of the machine falls
  // on one round; each row gives the median of the rounds.
  const char* names[] = {"nothing", "free text", "worst-case grammar"};
  std::vector<double> p50[3], p99[3];
  int64_t beside_tokens[3] = {}, worst_failed = 0;
  double wall[3] = {};
  std::string worst_error;
  for (int round = 0; round < a.rounds; ++round) {
    for (int kind = 0; kind < 3; ++kind) {
      const IsolationResult r = RunIsolation(**engine, **model, a, kind, 1000 + 100 * uint64_t(round));
      p50[kind].push_back(Percentile(r.gaps_s, 0.5) * 1e3);
      p99[kind].push_back(Percentile(r.gaps_s, 0.99) * 1e3);
      beside_tokens[kind] += r.beside_tokens;
      wall[kind] += r.wall_s;
      if (kind == 2) {
        worst_failed += r.beside_failed;
        if (r.beside_failed) worst_error = r.beside_error;
      }
    }
  }
  const double alone = Percentile(p99[0], 0.5), free = Percentile(p99[1], 0.5);
  for (int kind = 0; kind < 3; ++kind) {
    const double m = Percentile(p99[kind], 0.5);
    std::printf("%-22s %10.2f %10.2f %13.2f %14s %14lld %8.2f\n", names[kind], Percentile(p50[kind], 0.5), m,
                alone > 0 ? m / alone : 0.0, kind == 2 && free > 0 ? std::to_string(m / free).substr(0, 4).c_str() : "-",
                (long long)beside_tokens[kind], wall[kind]);
  }
  std::printf("\np99 by round (ms):");
  for (int kind = 0; kind < 3; ++kind) {
    std::printf(" %s", names[kind]);
    for (double v : p99[kind]) std::printf(" %.2f", v);
    std::printf(kind < 2 ? ";" : "\n");
  }
  std::printf("worst-case choices failed: %lld of %d%s%s\n", (long long)worst_failed, a.beside * a.rounds,
              worst_error.empty() ? "" : ", with: ", worst_error.c_str());
  (*engine)->Shutdown(std::chrono::milliseconds(0));
  return 0;
}

}  // namespace

int RunStructuredBench(const StructuredBenchOptions& a) {
  if (a.isolation) return RunIsolationBench(a);
  auto model = a.model.Load();
  if (!model.ok()) return 1;
  EngineOptions eo;
  eo.threads = a.model.threads;
  eo.max_running = a.concurrency;
  eo.max_waiting = a.requests + 1;
  eo.prefix_cache = false;  // every mode computes its prompts alike
  auto engine = Engine::Create(**model, eo);
  if (!engine.ok()) return std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str()), 1;
  if (auto g = CompileConstraint(std::string("json_schema ") + kSchema); g.ok()) {
    std::printf("schema: shortest answer %lld bytes; %d requests, %d at a time, max_tokens %d, temperature 0.8\n\n",
                (long long)(*g)->MinBytesToAccept((*g)->Start()), a.requests, a.concurrency, a.max_tokens);
  }
  std::printf("%-12s %8s %8s %10s %12s %9s %10s\n", "format", "answers", "tokens", "decode tok/s", "vs free text",
              "complete", "wall s");
  const std::vector<std::pair<std::string, std::string>> modes = {
      {"text", ""}, {"json_object", "json_object"}, {"json_schema", std::string("json_schema ") + kSchema}};
  double free_rate = 0;
  for (const auto& [name, constraint] : modes) {
    RunMode(**engine, **model, a, constraint);  // warm: the grammar's masks and the caches
    const ModeResult r = RunMode(**engine, **model, a, constraint);
    const double rate = r.decode_s > 0 ? double(r.decode_tokens) / r.decode_s : 0;
    if (constraint.empty()) free_rate = rate;
    std::printf("%-12s %8lld %8lld %12.1f %12.2f %9s %10.2f\n", name.c_str(), (long long)r.answers,
                (long long)r.tokens, rate, free_rate > 0 ? rate / free_rate : 0.0,
                constraint.empty() ? "-" : (std::to_string(r.complete) + "/" + std::to_string(r.answers)).c_str(),
                r.wall_s);
  }
  (*engine)->Shutdown(std::chrono::milliseconds(0));
  return 0;
}

}  // namespace tandem::bench
