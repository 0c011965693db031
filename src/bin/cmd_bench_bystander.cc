// `tandem bench bystander`: its flags (the benchmark: bench/bystander.h).
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "bin/model_options.h"
#include "bench/bystander.h"

namespace tandem::cli {

using bench::BystanderBenchOptions;

void RegisterBystanderBench(CLI::App& bench) {
  auto a = std::make_shared<BystanderBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("bystander", "A short request's latency beside the worst request of each kind");
  ModelOptions::AddTo(cmd, &a->model);
  cmd->add_option("--choices", a->choices, "Hostile requests beside the bystander (a request's n)")
      ->check(CLI::Range(1, 64));
  AddMaxTokens(cmd, &a->max_tokens);
  cmd->add_option("--rounds", a->rounds, "Rounds per kind (medians reported)")->check(CLI::Range(1, 100));
  AddContextTokens(cmd, &a->context);
  cmd->add_option("--replay-tokens-per-pass", a->replay_tokens_per_pass,
                  "Resumed tokens one pass of the engine loop replays (EngineOptions::replay_tokens_per_pass)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->callback([a] { SetExitCode(bench::RunBystanderBench(*a)); });
}

}  // namespace tandem::cli
