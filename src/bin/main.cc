// The `tandem` command: one binary, one subcommand per role or tool.
#include <CLI/CLI.hpp>

#include "bin/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tandem: prefill/decode-disaggregated LLM inference server"};
  app.require_subcommand(1);
  tandem::cli::RegisterCommands(app);
  CLI11_PARSE(app, argc, argv);
  return tandem::cli::ExitCode();
}
