// `tandem bench structured`: its flags (the benchmark: bench/structured.h).
#include "bin/commands.h"
#include "bin/shared_flags.h"
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
  AddMaxTokens(cmd, &a->max_tokens);
  cmd->add_flag("--isolation", a->isolation,
                 "Instead: ordinary requests' inter-token latency alone, beside free text, and beside the worst "
                 "structured-output request (n choices of a recursive schema driven into new states)");
  cmd->add_option("--ordinary", a->ordinary, "--isolation: ordinary requests")->check(CLI::Range(1, 256));
  cmd->add_option("--beside", a->beside, "--isolation: choices beside them")->check(CLI::Range(1, 256));
  cmd->add_option("--rounds", a->rounds, "--isolation: rounds of the three runs (medians reported)")
      ->check(CLI::Range(1, 100));
  AddGrammarBudget(cmd, &a->grammar_work_per_step, &a->grammar_time_share);
  cmd->callback([a] { SetExitCode(bench::RunStructuredBench(*a)); });
}

}  // namespace tandem::cli
