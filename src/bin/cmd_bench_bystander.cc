// `tandem bench bystander`: its flags (the benchmark: bench/bystander.h).
#include "bin/commands.h"
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
  cmd->add_option("--max-tokens", a->max_tokens, "The decoding kinds' max_tokens")->check(CLI::Range(8, 1 << 16));
  cmd->add_option("--rounds", a->rounds, "Rounds per kind (medians reported)")->check(CLI::Range(1, 100));
  cmd->add_option("--ctx-size", a->context, "The engine's context (the resume kind replays all of it)")
      ->check(CLI::Range(int64_t(128), int64_t(1) << 20));
  cmd->add_option("--replay-tokens-per-pass", a->replay_tokens_per_pass,
                  "Resumed tokens one pass of the engine loop replays (EngineOptions::replay_tokens_per_pass)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30));
  cmd->callback([a] { SetExitCode(bench::RunBystanderBench(*a)); });
}

}  // namespace tandem::cli
