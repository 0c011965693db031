// Subcommand registration. Each command file registers its subcommand on the
// app and records the process exit code when it runs.
#pragma once

#include <CLI/CLI.hpp>

namespace tandem::cli {

void RegisterCommands(CLI::App& app);
void RegisterGenerate(CLI::App& app);
void RegisterMkmodel(CLI::App& app);
void RegisterBench(CLI::App& app);
void RegisterServe(CLI::App& app);
void RegisterPrefill(CLI::App& app);
void RegisterRouter(CLI::App& app);
void RegisterServeBench(CLI::App& bench);  // under `bench`
void RegisterHandoffBench(CLI::App& bench);
void RegisterPrefillBench(CLI::App& bench);
void RegisterAgenticBench(CLI::App& bench);
void RegisterVerify(CLI::App& app);

void SetExitCode(int code);
int ExitCode();

}  // namespace tandem::cli
