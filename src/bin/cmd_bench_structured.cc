// `tandem bench structured`: what a response format costs decode. The same
// prompts run free (ignoring end of text, so every answer is max_tokens
// long), as any JSON object, and under a JSON schema; the report gives decode
// tokens/s of each and the ratio to free text, measured in one run, and
// checks every constrained answer parses and is complete.
#include <chrono>
#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "bin/commands.h"
#include "bin/model_options.h"
#include "runtime/engine.h"
#include "runtime/json_schema.h"

namespace tandem::cli {
namespace {

struct StructuredBenchArgs {
  ModelOptions model;
  int requests = 32;
  int concurrency = 8;
  int max_tokens = 128;
};

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

ModeResult RunMode(Engine& engine, const Model& model, const StructuredBenchArgs& a, const std::string& constraint) {
  const Tokenizer& tok = model.tokenizer();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
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
      if (!ev.tokens.empty() && first == Clock::time_point{}) first = Clock::now();
      n += int64_t(ev.tokens.size());
      text += ev.text;
    }
    const auto last = Clock::now();
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
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

int RunStructuredBench(const StructuredBenchArgs& a) {
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

}  // namespace

void RegisterStructuredBench(CLI::App& bench) {
  auto a = std::make_shared<StructuredBenchArgs>();
  CLI::App* cmd = bench.add_subcommand("structured", "Decode speed with a response format vs free text");
  a->model.AddTo(cmd);
  cmd->add_option("--requests", a->requests, "Requests per format")->check(CLI::Range(1, 100000));
  cmd->add_option("--concurrency", a->concurrency, "Requests decoded together")->check(CLI::Range(1, 1024));
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens per answer")->check(CLI::Range(64, 1 << 16));
  cmd->callback([a] { SetExitCode(RunStructuredBench(*a)); });
}

}  // namespace tandem::cli
