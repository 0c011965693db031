// `tandem bench prefill`: its flags (the benchmark: bench/prefill.h).
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "bin/model_options.h"
#include "bench/prefill.h"

namespace tandem::cli {

using bench::PrefillBenchOptions;

void RegisterPrefillBench(CLI::App& bench) {
  auto a = std::make_shared<PrefillBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("prefill", "Prefill engine under a burst of next-round prompts: batched vs one at a time");
  ModelOptions::AddTo(cmd, &a->model);
  cmd->add_option("--requests", a->requests, "Requests in the burst")->check(CLI::Range(1, 4096));
  cmd->add_option("--prefix-tokens", a->prefix_tokens, "Cached tokens before each request's new ones")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  cmd->add_option("--new-min", a->new_min, "Fewest new tokens")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--new-max", a->new_max, "Most new tokens")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  AddChunkSize(cmd, &a->chunk_size);
  AddMaxBatchTokens(cmd, &a->max_batch_tokens);  // the batched runs'
  AddMaxRunning(cmd, &a->max_running);
  cmd->add_option("--attention", a->attention, "dense or sparse");
  cmd->callback([a] { SetExitCode(bench::RunPrefillBench(*a)); });
}

}  // namespace tandem::cli
