// `tandem bench structured`: its flags (the benchmark: bench/structured.h).
#include "bin/commands.h"
#include "bin/model_options.h"
#include "bench/structured.h"

namespace tandem::cli {

using bench::StructuredBenchOptions;

void RegisterStructuredBench(CLI::App& bench) {
  auto a = std::make_shared<StructuredBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("structured", "Decode speed with a response format vs free text");
  ModelOptions::AddTo(cmd, &a->model);
  cmd->add_option("--requests", a->requests, "Requests per format")->check(CLI::Range(1, 100000));
  cmd->add_option("--concurrency", a->concurrency, "Requests decoded together")->check(CLI::Range(1, 1024));
  cmd->add_option("--max-tokens", a->max_tokens, "Tokens per answer")->check(CLI::Range(64, 1 << 16));
  cmd->add_flag("--isolation", a->isolation,
                 "Instead: ordinary requests' inter-token latency alone, beside free text, and beside the worst "
                 "structured-output request (n choices of a recursive schema driven into new states)");
  cmd->add_option("--ordinary", a->ordinary, "--isolation: ordinary requests")->check(CLI::Range(1, 256));
  cmd->add_option("--beside", a->beside, "--isolation: choices beside them")->check(CLI::Range(1, 256));
  cmd->add_option("--rounds", a->rounds, "--isolation: rounds of the three runs (medians reported)")
      ->check(CLI::Range(1, 100));
  cmd->add_option("--grammar-work-per-step", a->grammar_work_per_step,
                  "Structured outputs: grammar work all token masks of one step may take (as serve's)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  cmd->add_option("--grammar-time-share", a->grammar_time_share,
                  "Structured outputs: and at most this fraction of a step's model time (as serve's)")
      ->check(CLI::Range(0.001, 100.0));
  cmd->callback([a] { SetExitCode(bench::RunStructuredBench(*a)); });
}

}  // namespace tandem::cli
