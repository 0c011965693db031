#include "bench/bystander.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/splitmix.h"
#include "loadgen/grammar_load.h"
#include "runtime/engine.h"

namespace tandem::bench {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kKinds[] = {"free", "resume", "stops", "logit-bias", "penalties", "grammar"};

// 63 stop strings of 127 bytes, 8,001 bytes in all (the cap is 8,192), that
// the model's text never contains.
std::vector<std::string> LongStops() {
  std::vector<std::string> stops;
  for (int i = 0; i < 63; ++i) {
    std::string s(127, 'q');
    for (size_t k = 0; k < s.size(); ++k) s[k] = char('a' + SplitMix64(uint64_t(i) * 131 + k) % 26);
    s[0] = '\x01';  // never generated as text
    stops.push_back(std::move(s));
  }
  return stops;
}

RequestSpec Hostile(const std::string& kind, const Tokenizer& tok, int64_t context, int max_tokens, int c) {
  if (kind == "grammar") return loadgen::GrammarWorstCase(tok, 1000 + uint64_t(c), max_tokens);
  RequestSpec s;
  s.prompt = tok.Encode("Choice " + std::to_string(c) + ": tell a long story about the sea.", tok.add_bos(), false);
  s.max_tokens = max_tokens;
  s.ignore_eos = true;
  s.sampling.temperature = 0.8f;
  s.sampling.seed = 7 + uint64_t(c);
  if (kind == "resume" || kind == "stops") s.stop = LongStops();
  if (kind == "resume") {
    const int32_t one = tok.Encode(" sea", false, false).empty() ? 100 : tok.Encode(" sea", false, false)[0];
    s.resumed.assign(size_t(context) - s.prompt.size() - 1, one);
    s.max_tokens = int32_t(s.resumed.size());  // ends when the replay does
  }
  if (kind == "logit-bias") {
    const int32_t vocab = tok.vocab_size();
    for (size_t i = 0; i < SamplingParams::kMaxLogitBias; ++i) {
      s.sampling.logit_bias.push_back({int32_t(SplitMix64(i + uint64_t(c) * 7919) % uint64_t(vocab)), i % 2 ? 3.0f : -3.0f});
    }
  }
  if (kind == "penalties") {
    s.sampling.repetition_penalty = 1.3f;
    s.sampling.frequency_penalty = 1.5f;
    s.sampling.presence_penalty = 1.5f;
  }
  return s;
}

// Submit to end, in ms; -1 when it failed.
double Bystander(Engine& engine, const Tokenizer& tok, int i) {
  RequestSpec s;
  s.prompt = tok.Encode("The bystander " + std::to_string(i) + " asks a short question.", tok.add_bos(), false);
  s.max_tokens = 2;
  s.ignore_eos = true;
  const auto t0 = Env::Default().Now();
  auto h = engine.Submit(std::move(s));
  if (!h.ok()) return -1;
  StreamEvent ev;
  while ((*h)->Next(&ev, std::chrono::seconds(600))) {
    if (ev.kind == StreamEvent::Kind::kFinish) return std::chrono::duration<double, std::milli>(Env::Default().Now() - t0).count();
    if (ev.kind == StreamEvent::Kind::kError) return -1;
  }
  return -1;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int RunBystanderBench(const BystanderBenchOptions& a) {
  auto model = a.model.Load();
  if (!model.ok()) return 1;
  const Tokenizer& tok = (*model)->tokenizer();
  EngineOptions eo;
  eo.threads = a.model.threads;
  const int64_t trained = (*model)->config().context_length;
  eo.context_tokens = a.context > 0 ? std::min<int64_t>(a.context, trained) : trained;  // 0: the model's
  if (eo.context_tokens < 128) {
    return std::fprintf(stderr, "error: --ctx-size must leave room for the resume kind: at least 128 tokens\n"), 1;
  }
  eo.cache_tokens = (eo.context_tokens + 64) * (a.choices + 2);
  eo.max_running = a.choices + 1;
  eo.max_waiting = 2 * a.choices + 8;  // a round's requests, and the last round's still ending
  eo.replay_tokens_per_pass = a.replay_tokens_per_pass;
  auto engine = Engine::Create(**model, eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  Engine& e = **engine;
  std::printf("bystander: a 2-token greedy request, Submit to end, alone and beside %d choices of each kind "
              "(max_tokens %d, context %lld, replay %lld tokens a pass); medians of %d rounds\n\n",
              a.choices, a.max_tokens, (long long)eo.context_tokens, (long long)eo.replay_tokens_per_pass, a.rounds);
  std::printf("%-11s %12s %10s %10s %18s %17s\n", "beside", "bystander ms", "vs alone", "vs free", "replay max/pass",
              "grammar max/step");
  int probe = 0;
  for (int i = 0; i < 3; ++i) (void)Bystander(e, tok, probe++);  // warm
  std::vector<double> alone;
  for (int r = 0; r < a.rounds; ++r) alone.push_back(Bystander(e, tok, probe++));
  const double alone_ms = Median(alone);
  std::printf("%-11s %12.1f %10s %10s %18s %17s\n", "(alone)", alone_ms, "1.00", "-", "-", "-");
  double free_ms = 0;
  int failed = 0;
  for (const std::string kind : kKinds) {
    std::vector<double> ms;
    for (int r = 0; r < a.rounds; ++r) {
      std::vector<std::shared_ptr<RequestHandle>> hostile;
      for (int c = 0; c < a.choices; ++c) {
        auto h = e.Submit(Hostile(kind, tok, eo.context_tokens, a.max_tokens, c + r * a.choices));
        if (!h.ok()) {
          std::fprintf(stderr, "%s: refused: %s\n", kind.c_str(), h.status().ToString().c_str());
          return 1;
        }
        hostile.push_back(*h);
      }
      // Decoding kinds: the bystander arrives once they all decode. A resume
      // is timed from its arrival: its replay is the cost.
      if (kind != "resume") {
        for (auto& h : hostile) h->WaitForEvent(std::chrono::seconds(600));
      }
      const double got = Bystander(e, tok, probe++);
      if (got < 0) ++failed;
      ms.push_back(got);
      for (auto& h : hostile) h->Cancel();
      for (auto& h : hostile) {
        StreamEvent ev;
        while (h->Next(&ev, std::chrono::seconds(600)) && ev.kind == StreamEvent::Kind::kText) {
        }
      }
    }
    const double m = Median(ms);
    if (kind == "free") free_ms = m;
    const EngineStats st = e.Stats();
    char vs_free[32] = "-";
    if (free_ms > 0) std::snprintf(vs_free, sizeof(vs_free), "%.2f", m / free_ms);
    std::printf("%-11s %12.1f %10.2f %10s %18lld %17lld\n", kind.c_str(), m, alone_ms > 0 ? m / alone_ms : 0.0,
                vs_free, (long long)st.replay_max_pass, (long long)st.grammar_work_max_step);
  }
  e.Shutdown(std::chrono::milliseconds(0));
  if (failed > 0) std::fprintf(stderr, "error: %d bystander requests failed\n", failed);
  return failed > 0 ? 1 : 0;
}

}  // namespace tandem::bench
