// `tandem bench spec`: its flags (the benchmark: bench/spec.h).
#include "bench/spec.h"
#include "bin/commands.h"
#include "bin/model_options.h"
#include "bin/shared_flags.h"

namespace tandem::cli {

void RegisterSpecBench(CLI::App& bench) {
  auto a = std::make_shared<bench::SpecBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "spec", "Speculative decoding: acceptance, tokens per step, speedup and the verify step's cost (answers checked)");
  ModelOptions::AddTo(cmd, &a->model);
  cmd->add_option("--drafts", a->speculate, "Draft sizes compared (each engine's --speculate)")
      ->delimiter(',')
      ->check(CLI::Range(1, 16));
  cmd->add_option("--acceptance", a->acceptance, "Per-token acceptance of the set-acceptance drafts (0..1)")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--requests", a->requests, "Requests, one at a time")->check(CLI::Range(1, 1000));
  AddMaxTokens(cmd, &a->max_tokens);
  cmd->add_option("--verify-context", a->context, "Context tokens the verify step's cost is measured at")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  AddRepeat(cmd, &a->repeat);
  cmd->callback([a] { SetExitCode(bench::RunSpecBench(*a)); });
}

}  // namespace tandem::cli
