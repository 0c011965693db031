// `tandem bench serve`: its flags (the benchmark: bench/serve.h).
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "bin/model_options.h"
#include "bench/serve.h"

namespace tandem::cli {

using bench::ServeBenchOptions;

void RegisterServeBench(CLI::App& bench) {
  auto a = std::make_shared<ServeBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("serve", "Throughput and TTFT/ITL percentiles at several concurrencies (without --url: a server started in this process)");
  ModelOptions::AddTo(cmd, &a->model);
  AddServerUrl(cmd, &a->url);
  cmd->add_option("--concurrency", a->concurrency, "Concurrent clients per level")->delimiter(',');
  cmd->add_option("--requests-per-client", a->requests_per_client, "Requests each client sends")->check(CLI::Range(1, 100000));
  AddMaxTokens(cmd, &a->max_tokens);
  cmd->add_option("--prompt-words", a->prompt_words, "Words per prompt")->check(CLI::Range(1, 1 << 20));
  cmd->callback([a] { SetExitCode(bench::RunServeBench(*a)); });
}

}  // namespace tandem::cli
