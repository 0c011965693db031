// Flags that commands take outside a whole group, each declared here once so
// that a name means one thing in every command (tests/e2e/cli_flags_test.cc).
// The groups (engine_flags.h, link_flags.h, model_options.h ...) use them too.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace tandem::cli {

// The engine's sizes: --ctx-size, --chunk-size, --max-batch-tokens, --max-running.
CLI::Option* AddContextTokens(CLI::App* cmd, int64_t* tokens);
CLI::Option* AddChunkSize(CLI::App* cmd, int32_t* tokens);
CLI::Option* AddMaxBatchTokens(CLI::App* cmd, int32_t* tokens);
CLI::Option* AddMaxRunning(CLI::App* cmd, int32_t* sequences);
// --grammar-work-per-step, --grammar-time-share: the structured outputs' budget per step.
void AddGrammarBudget(CLI::App* cmd, int64_t* work_per_step, double* time_share);
CLI::Option* AddThreads(CLI::App* cmd, int* threads);  // -t,--threads
// --max-tokens (generate also as -n): tokens an answer may have.
CLI::Option* AddMaxTokens(CLI::App* cmd, int* tokens, bool short_name = false);
// --host, --port: where a server listens.
void AddListen(CLI::App* cmd, std::string* host, int* port);
CLI::Option* AddShutdownTimeout(CLI::App* cmd, double* seconds);
CLI::Option* AddRequestTimeout(CLI::App* cmd, double* seconds);  // a server's, for each request
CLI::Option* AddSilenceTimeout(CLI::App* cmd, int64_t* ms);  // the router's moves
CLI::Option* AddTransport(CLI::App* cmd, std::string* name);  // how handoff bytes travel
// --cluster-key-file, --insecure-no-cluster-key.
void AddClusterKey(CLI::App* cmd, std::string* file, bool* insecure);
// --reference-url, --near-tie: the differential oracle.
void AddReference(CLI::App* cmd, std::string* url, double* near_tie_nats);
CLI::Option* AddServerUrl(CLI::App* cmd, std::string* url);  // --url: the server under test
CLI::Option* AddModelPreset(CLI::App* cmd, std::string* preset);  // --preset: a generated model
CLI::Option* AddRepeat(CLI::App* cmd, int* runs);  // --repeat: a benchmark's runs of each point

}  // namespace tandem::cli
