// `tandem bench handoff`: its flags (the benchmark: bench/handoff.h).
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "bench/handoff.h"

namespace tandem::cli {

using bench::HandoffBenchOptions;

void RegisterHandoffBench(CLI::App& bench) {
  auto a = std::make_shared<HandoffBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("handoff", "Page transfer bandwidth over UCX vs page-scatter memcpy");
  cmd->add_option("--page-bytes", a->page_bytes, "Page sizes")->delimiter(',');
  cmd->add_option("--pages", a->pages, "Pages per round")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--rounds", a->rounds, "Rounds")->check(CLI::Range(1, 1000));
  AddTransport(cmd, &a->transport);  // tcp also measures a plain TCP socket
  cmd->callback([a] { SetExitCode(bench::RunHandoffBench(*a)); });
}

}  // namespace tandem::cli
