// `tandem serve`: the colocated OpenAI-compatible server (prefill and decode
// in one engine). SIGTERM or SIGINT: stop admitting, let in-flight requests
// finish (up to --shutdown-timeout), exit 0.
#include <signal.h>

#include <cstdio>
#include <memory>

#include "bin/commands.h"
#include "bin/disagg_launcher.h"
#include "bin/model_options.h"
#include "kernels/cpu.h"
#include "server/http_server.h"

namespace tandem::cli {
namespace {

struct ServeArgs {
  ModelOptions model;
  ServerOptions server;
  EngineOptions engine;
  std::string attention = "dense", index_k_dtype = "fp8";
  double request_timeout_s = 600, shutdown_timeout_s = 30;
  bool no_prefix_cache = false;
  std::string verify = "all";
  bool disagg = false;
  bool unsafe_early_commit = false;
  std::string host_cache_size, disk_cache_dir, disk_cache_size = "4G", write_policy = "write-through";
  int selective_hits = 2;
  int64_t prefetch_timeout_ms = 2000;
  int64_t debug_copy_delay_us = 0;
  bool debug_ungated_index_k = false;
  int64_t debug_put_delay_us = 0;          // --disagg: passed to the prefill engine
  int64_t debug_wedge_after_messages = -1;  // --disagg: passed to the prefill engine
};

// Re-spells this command's options for the child processes of --disagg.
DisaggLaunch LaunchFor(const ServeArgs& a) {
  DisaggLaunch l;
  l.host = a.server.host;
  l.port = a.server.port;
  if (!a.model.model_path.empty()) l.model_args = {"-m", a.model.model_path};
  l.model_args.push_back("-t");
  l.model_args.push_back(std::to_string(a.model.threads));
  if (!a.model.isa.empty()) l.model_args.insert(l.model_args.end(), {"--isa", a.model.isa});
  l.attention_args = {"--attention", a.attention, "--index-k-dtype", a.index_k_dtype, "--topk",
                      std::to_string(a.engine.attention.top_k)};
  l.decode_args = {"--cache-tokens", std::to_string(a.engine.cache_tokens), "--max-running",
                   std::to_string(a.engine.max_running), "--max-waiting", std::to_string(a.engine.max_waiting),
                   "--request-timeout", std::to_string(a.request_timeout_s), "--verify-handoff", a.verify};
  if (!a.server.model_id.empty()) l.decode_args.insert(l.decode_args.end(), {"--model-id", a.server.model_id});
  if (a.engine.context_tokens > 0) l.decode_args.insert(l.decode_args.end(), {"--ctx-size", std::to_string(a.engine.context_tokens)});
  if (a.no_prefix_cache) l.decode_args.push_back("--no-prefix-cache");
  l.prefill_args = {"--chunk-size", std::to_string(a.engine.chunk_size)};
  if (a.unsafe_early_commit) l.prefill_args.push_back("--debug-unsafe-early-commit");
  if (a.debug_put_delay_us > 0) {
    l.prefill_args.insert(l.prefill_args.end(), {"--debug-put-delay-us", std::to_string(a.debug_put_delay_us)});
  }
  if (a.debug_wedge_after_messages >= 0) {
    l.prefill_args.insert(l.prefill_args.end(),
                          {"--debug-wedge-after-messages", std::to_string(a.debug_wedge_after_messages)});
  }
  return l;
}

int WaitForSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

// "512M", "2G", "65536" (bytes); K/M/G/T are powers of 1024.
StatusOr<int64_t> ParseBytes(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  std::string unit = end ? std::string(end) : "";
  double mult = 1;
  if (unit == "K" || unit == "k") mult = 1024.0;
  else if (unit == "M" || unit == "m") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) return InvalidArgument(flag + " must be a size like 512M or 2G, not '" + text + "'");
  if (end == text.c_str() || !(v > 0)) return InvalidArgument(flag + " must be a positive size, not '" + text + "'");
  return int64_t(v * mult);
}

Status ApplyTierFlags(ServeArgs& a) {
  if (a.host_cache_size.empty()) {
    if (!a.disk_cache_dir.empty()) return InvalidArgument("--disk-cache-dir needs --host-cache-size (L3 pages pass through L2)");
    return Status::Ok();
  }
  TANDEM_ASSIGN_OR_RETURN(a.engine.tiers.host_bytes, ParseBytes("--host-cache-size", a.host_cache_size));
  a.engine.tiers.disk_dir = a.disk_cache_dir;
  if (!a.disk_cache_dir.empty()) {
    TANDEM_ASSIGN_OR_RETURN(a.engine.tiers.disk_bytes, ParseBytes("--disk-cache-size", a.disk_cache_size));
  }
  TANDEM_ASSIGN_OR_RETURN(a.engine.tiers.policy, ParseWritePolicy(a.write_policy));
  a.engine.tiers.selective_hits = a.selective_hits;
  a.engine.tiers.prefetch_deadline = std::chrono::milliseconds(a.prefetch_timeout_ms);
  a.engine.tiers.debug_copy_delay = std::chrono::microseconds(a.debug_copy_delay_us);
  a.engine.debug_ungated_index_k = a.debug_ungated_index_k;
  if (a.debug_copy_delay_us > 0 || a.debug_ungated_index_k) {
    std::fprintf(stderr, "WARNING: cache-tier debug faults on (copy delay %lld us per layer%s): tests only\n",
                 (long long)a.debug_copy_delay_us,
                 a.debug_ungated_index_k ? ", the indexer reads loading layers WITHOUT waiting for their gates" : "");
  }
  return Status::Ok();
}

int RunServe(ServeArgs& a) {
  if (a.disagg) return RunDisagg(LaunchFor(a));
  // Block the signals in every thread; the main thread takes them with sigwait.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  auto model = a.model.Load();
  if (!model.ok()) {
    std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
    return 1;
  }
  auto attention = ParseAttentionOptions(a.attention, a.index_k_dtype, a.engine.attention.top_k);
  if (!attention.ok()) {
    std::fprintf(stderr, "error: %s\n", attention.status().ToString().c_str());
    return 1;
  }
  a.engine.attention = *attention;
  if (Status st = ApplyTierFlags(a); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
    return 1;
  }
  a.engine.threads = a.model.threads;
  a.engine.prefix_cache = !a.no_prefix_cache;
  a.engine.request_timeout = std::chrono::milliseconds(int64_t(a.request_timeout_s * 1000));
  if (a.verify == "off") {
    a.engine.verify = transfer::VerifyMode::kOff;
  } else if (a.verify == "sample") {
    a.engine.verify = transfer::VerifyMode::kSample;
  } else if (a.verify == "all") {
    a.engine.verify = transfer::VerifyMode::kAll;
  } else {
    std::fprintf(stderr, "error: --verify-handoff must be off, sample or all, not '%s'\n", a.verify.c_str());
    return 1;
  }
  auto engine = Engine::Create(**model, a.engine);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  HttpServer server(**engine, **model, a.server);
  if (Status st = server.Start(); !st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "tandem serve: %s on http://%s:%d (%s kernels, %d threads, %lld cache tokens, %s attention)\n",
               (*model)->config().name.c_str(), a.server.host.c_str(), server.port(),
               kernels::IsaName(kernels::ActiveIsa()), a.model.threads, (long long)a.engine.cache_tokens,
               a.attention.c_str());
  const int sig = WaitForSignal();
  std::fprintf(stderr, "tandem serve: signal %d, draining in-flight requests\n", sig);
  (*engine)->Shutdown(std::chrono::milliseconds(int64_t(a.shutdown_timeout_s * 1000)));
  server.Stop();
  std::fprintf(stderr, "tandem serve: stopped\n");
  return 0;
}

}  // namespace

void RegisterServe(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API (colocated engine)");
  a->model.AddTo(cmd);
  cmd->add_option("--host", a->server.host, "Address to listen on");
  cmd->add_option("--port", a->server.port, "Port (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--model-id", a->server.model_id, "Model name clients use (default: the model's)");
  cmd->add_option("--max-body-bytes", a->server.max_body_bytes, "Largest request body");
  cmd->add_option("--ctx-size", a->engine.context_tokens, "Context tokens per sequence (default: the model's)");
  cmd->add_option("--cache-tokens", a->engine.cache_tokens, "Page pool size in tokens")->check(CLI::Range(int64_t(64), int64_t(1) << 30));
  cmd->add_option("--max-running", a->engine.max_running, "Sequences in the decode batch")->check(CLI::Range(1, 4096));
  cmd->add_option("--max-waiting", a->engine.max_waiting, "Queued requests before 429")->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--chunk-size", a->engine.chunk_size, "Prefill tokens per sequence per step")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-batch-tokens", a->engine.max_batch_tokens, "Tokens per step")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--request-timeout", a->request_timeout_s, "Seconds before a request is failed")->check(CLI::PositiveNumber);
  cmd->add_option("--shutdown-timeout", a->shutdown_timeout_s, "Seconds to drain on SIGTERM")->check(CLI::NonNegativeNumber);
  cmd->add_option("--attention", a->attention, "dense or sparse");
  cmd->add_option("--topk", a->engine.attention.top_k, "Sparse attention top-k")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--index-k-dtype", a->index_k_dtype, "fp8 or bf16");
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "Disable prefix reuse");
  cmd->add_option("--prefill", a->engine.prefill_address,
                  "Disaggregated decode: prefill engine's UCX address host:port (empty: colocated)");
  cmd->add_option("--verify-handoff", a->verify, "Check handoff digests: off, sample or all");
  cmd->add_flag("--disagg", a->disagg,
                "Start a prefill engine, a decode server and a router on this host (router on --port)");
  cmd->add_flag("--debug-unsafe-early-commit", a->unsafe_early_commit,
                "With --disagg, UNSAFE, tests only: the prefill engine commits before index-K is flushed");
  cmd->add_option("--host-cache-size", a->host_cache_size,
                  "L2: a host-memory tier under the prefix cache, e.g. 2G (default: none)");
  cmd->add_option("--disk-cache-dir", a->disk_cache_dir, "L3: page files here survive restarts (needs --host-cache-size)");
  cmd->add_option("--disk-cache-size", a->disk_cache_size, "L3 size limit, e.g. 20G");
  cmd->add_option("--cache-write-policy", a->write_policy,
                  "L1 -> L2: write-through, write-through-selective or write-back");
  cmd->add_option("--cache-selective-hits", a->selective_hits, "write-through-selective: hits before a page is copied")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--prefetch-timeout-ms", a->prefetch_timeout_ms,
                  "How long a request waits for its L3 pages before recomputing them")
      ->check(CLI::Range(int64_t(0), int64_t(3600000)));
  cmd->add_option("--debug-copy-delay-us", a->debug_copy_delay_us, "Tests only: the tier copy engine sleeps per layer")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--debug-ungated-index-k", a->debug_ungated_index_k,
                "Tests only, UNSAFE: the indexer reads layers still loading from L2 (the production bug)");
  cmd->add_option("--debug-put-delay-us", a->debug_put_delay_us,
                  "With --disagg, tests only: the prefill engine delays every page write")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--debug-wedge-after-messages", a->debug_wedge_after_messages,
                  "With --disagg, tests only: the prefill engine stops sending after this many messages (wedged)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([a] { SetExitCode(RunServe(*a)); });
}

}  // namespace tandem::cli
