#include "bin/shared_flags.h"

#include "model/presets.h"

namespace tandem::cli {

CLI::Option* AddContextTokens(CLI::App* cmd, int64_t* tokens) {
  return cmd->add_option("--ctx-size", *tokens, "Context tokens per sequence (0: the model's; the same on every engine)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
}

CLI::Option* AddChunkSize(CLI::App* cmd, int32_t* tokens) {
  return cmd->add_option("--chunk-size", *tokens, "Prefill tokens of one prompt per step")->check(CLI::Range(1, 1 << 20));
}

CLI::Option* AddMaxBatchTokens(CLI::App* cmd, int32_t* tokens) {
  return cmd->add_option("--max-batch-tokens", *tokens, "Tokens of all sequences together per step")
      ->check(CLI::Range(1, 1 << 20));
}

CLI::Option* AddMaxRunning(CLI::App* cmd, int32_t* sequences) {
  return cmd
      ->add_option("--max-running", *sequences,
                   "Sequences scheduled together (decode: the batch; prefill: prompts holding pages until handed off)")
      ->check(CLI::Range(1, 4096));
}

void AddGrammarBudget(CLI::App* cmd, int64_t* work_per_step, double* time_share) {
  cmd->add_option("--grammar-work-per-step", *work_per_step,
                  "Structured outputs: grammar work (about a nanosecond a unit) all token masks of one step may take; "
                  "a mask that needs more finishes in later steps")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  cmd->add_option("--grammar-time-share", *time_share,
                  "Structured outputs: and at most this fraction of a step's model time, when sequences "
                  "computed in it (what one request's masks may add to everyone's inter-token latency)")
      ->check(CLI::Range(0.001, 100.0));
}

CLI::Option* AddThreads(CLI::App* cmd, int* threads) {
  return cmd->add_option("-t,--threads", *threads, "Worker threads")->check(CLI::Range(1, 256));
}

CLI::Option* AddMaxTokens(CLI::App* cmd, int* tokens, bool short_name) {
  return cmd->add_option(short_name ? "-n,--max-tokens" : "--max-tokens", *tokens, "Tokens an answer may have")
      ->check(CLI::Range(0, 1 << 24));
}

void AddListen(CLI::App* cmd, std::string* host, int* port) {
  cmd->add_option("--host", *host, "Address to listen on");
  cmd->add_option("--port", *port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
}

CLI::Option* AddShutdownTimeout(CLI::App* cmd, double* seconds) {
  return cmd
      ->add_option("--shutdown-timeout", *seconds,
                   "Seconds to drain on SIGTERM: new requests get 503, those in flight finish")
      ->check(CLI::NonNegativeNumber);
}

CLI::Option* AddRequestTimeout(CLI::App* cmd, double* seconds) {
  return cmd
      ->add_option("--request-timeout", *seconds,
                   "Seconds a request may take before it is failed (a router abandons it upstream)")
      ->check(CLI::PositiveNumber);
}

CLI::Option* AddSilenceTimeout(CLI::App* cmd, int64_t* ms) {
  return cmd
      ->add_option("--silence-timeout-ms", *ms,
                   "The router's: a request whose decode server has sent it nothing this long, while that server does "
                   "not answer its health checks (or says its loop is stalled), moves to another (its stream resumed); "
                   "0: never (serve: with --disagg)")
      ->check(CLI::Range(int64_t(0), int64_t(600'000)));
}

CLI::Option* AddTransport(CLI::App* cmd, std::string* name) {
  return cmd->add_option("--transport", *name,
                         "How handoff bytes travel between engines: auto (what UCX finds), shm (one host) or tcp");
}

void AddClusterKey(CLI::App* cmd, std::string* file, bool* insecure) {
  cmd->add_option("--cluster-key-file", *file,
                  "The engines' shared secret (16+ bytes, transfer/cluster_key.h): peers prove it before a destination "
                  "is taken, it signs the discovery records (only records signed with it are used) and encrypts KV "
                  "events (serve --disagg: default, a fresh random one)");
  cmd->add_flag("--insecure-no-cluster-key", *insecure,
                "INSECURE, tests only: no --cluster-key-file; engines link, and discovery records are taken, on "
                "loopback addresses only");
}

void AddReference(CLI::App* cmd, std::string* url, double* near_tie_nats) {
  cmd->add_option("--reference-url", *url,
                  "Differential oracle: judge answers against this reference deployment (host:port, the same model "
                  "served colocated, asked one request at a time) by its logprobs, instead of replaying them on the "
                  "reference engine");
  cmd->add_option("--near-tie", *near_tie_nats,
                  "With --reference-url, or across numerics identities: a served token within this many nats of the "
                  "reference's choice is drift")
      ->check(CLI::NonNegativeNumber);
}

CLI::Option* AddServerUrl(CLI::App* cmd, std::string* url) {
  return cmd->add_option("--url", *url, "host:port of the server under test (router, serve, or any OpenAI server)");
}

CLI::Option* AddRepeat(CLI::App* cmd, int* runs) {
  return cmd->add_option("--repeat", *runs, "Runs of each measured point (medians are reported)")
      ->check(CLI::Range(1, 100));
}

CLI::Option* AddModelPreset(CLI::App* cmd, std::string* preset) {
  std::string names;
  for (const auto& p : ModelPresets()) names += (names.empty() ? "" : ", ") + p.name;
  return cmd->add_option("--preset", *preset, "Model preset (weights generated from a seed): " + names);
}

}  // namespace tandem::cli
