// Subcommand registration. Each command file registers its subcommand on the
// app and records the process exit code when it runs.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <string>

#include "common/env.h"

namespace tandem::cli {

// Seconds from t0 until now (the benchmarks' timer).
inline double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(Env::Default().Now() - t0).count();
}

void RegisterCommands(CLI::App& app);
void RegisterGenerate(CLI::App& app);
void RegisterMkmodel(CLI::App& app);
void RegisterBench(CLI::App& app);
void RegisterServe(CLI::App& app);
void RegisterPrefill(CLI::App& app);
void RegisterRouter(CLI::App& app);
void RegisterModelBench(CLI::App& bench);  // under `bench`
void RegisterServeBench(CLI::App& bench);
void RegisterHandoffBench(CLI::App& bench);
void RegisterPrefillBench(CLI::App& bench);
void RegisterAgenticBench(CLI::App& bench);
void RegisterStructuredBench(CLI::App& bench);
void RegisterFrontDoorBench(CLI::App& bench);
void RegisterBystanderBench(CLI::App& bench);
void RegisterSpecBench(CLI::App& bench);
void RegisterVerify(CLI::App& app);

// --log-level for a server command; StartLog sets the process's role and
// level (common/log.h) and says what was wrong with a bad level.
void AddLogLevel(CLI::App* cmd, std::string* level);
bool StartLog(const std::string& role, const std::string& level);

void SetExitCode(int code);
int ExitCode();

}  // namespace tandem::cli
