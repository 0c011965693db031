// `tandem bench frontdoor --url HOST:PORT`: a running serve or router under the
// clients that break thread-per-connection servers (loadgen/frontdoor.h):
// idle connections, thousands of concurrent streams checked against their
// answers alone, slowloris, a huge chunked body, and clients that hang up.
// Prints a table and, with --json, the report as JSON.
#include <cstdio>
#include <fstream>
#include <memory>

#include "bench/agentic_shared.h"
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "loadgen/frontdoor.h"

namespace tandem::cli {

void RegisterFrontDoorBench(CLI::App& bench) {
  auto o = std::make_shared<FrontDoorOptions>();
  auto json_path = std::make_shared<std::string>();
  auto phase_s = std::make_shared<int>(180);
  CLI::App* cmd = bench.add_subcommand("frontdoor", "A running serve or router under hostile and numerous clients");
  auto url = std::make_shared<std::string>();
  AddServerUrl(cmd, url.get())->required();
  cmd->add_option("--engine-port", o->engine_port, "Where the engine's metrics are (a decode server behind a router)");
  cmd->add_option("--api-key", o->api_key, "Key to send");
  cmd->add_option("--idle", o->idle, "Idle connections held (0: skip)")->check(CLI::Range(0, 100000));
  cmd->add_option("--streams", o->streams, "Concurrent streaming requests (0: skip)")->check(CLI::Range(0, 100000));
  cmd->add_option("--prompts", o->prompts, "Distinct prompts among the streams")->check(CLI::Range(1, 100000));
  AddMaxTokens(cmd, &o->max_tokens);
  cmd->add_option("--slowloris", o->slowloris, "Connections dribbling a body (0: skip)")->check(CLI::Range(0, 100000));
  cmd->add_option("--big-body-bytes", o->big_body_bytes, "Chunked body to send at most (0: skip)");
  cmd->add_option("--hang-ups", o->hang_ups, "Non-streaming clients that hang up mid-answer (0: skip)")
      ->check(CLI::Range(0, 100000));
  cmd->add_option("--hang-up-max-tokens", o->hang_up_max_tokens, "Their max_tokens (long enough to be cut)");
  cmd->add_option("--phase-timeout", *phase_s, "Seconds each phase may take")->check(CLI::Range(1, 3600));
  cmd->add_option("--health-timeout", o->health_timeout_s, "Seconds a /health probe may take before it counts as failed")
      ->check(CLI::Range(1, 600));
  cmd->add_option("--json", *json_path, "Write the report here as JSON");
  cmd->callback([o, url, json_path, phase_s] {
    if (!bench::SplitUrl(*url, &o->host, &o->port)) {
      std::fprintf(stderr, "error: --url must be host:port, not '%s'\n", url->c_str());
      return SetExitCode(1);
    }
    o->phase_timeout = std::chrono::seconds(*phase_s);
    const FrontDoorReport r = RunFrontDoor(*o);
    if (!r.error.empty()) std::fprintf(stderr, "error: %s\n", r.error.c_str());
    std::printf("idle:      %lld connections held, %.0f bytes of resident memory each\n", (long long)r.idle_held,
                r.idle_bytes_per_connection);
    std::printf("streams:   %lld ok, %lld equal to alone, %lld failed, in %.1f s; time to first byte p50 %.0f ms, "
                "p99 %.0f ms\n",
                (long long)r.streams_ok, (long long)r.streams_equal, (long long)r.streams_failed, r.streams_wall_s,
                r.ttfb_p50_ms, r.ttfb_p99_ms);
    std::printf("health:    %lld probes during the streams, %lld failed, p99 %.1f ms, max %.1f ms\n",
                (long long)r.health_probes, (long long)r.health_failed, r.health_p99_ms, r.health_max_ms);
    std::printf("slowloris: %lld closed (%lld with 408) between %.1f and %.1f s, %lld still open; a real request "
                "meanwhile: %d in %.0f ms\n",
                (long long)r.slow_closed, (long long)r.slow_got_408, r.slow_closed_after_s_min, r.slow_closed_after_s_max,
                (long long)r.slow_open_at_end, r.request_during_slowloris_status, r.request_during_slowloris_ms);
    std::printf("big body:  %d after %.0f MiB sent; resident memory grew %.1f MiB\n", r.big_body_status,
                double(r.big_body_sent) / double(1 << 20), r.big_body_rss_growth_mib);
    std::printf("hang-ups:  %lld in the engine when their clients closed, %lld cancelled; settled (nothing running, no "
                "page used) in %.0f ms\n",
                (long long)r.hang_ups_running, (long long)r.hang_ups_cancelled, r.hang_up_settled_ms);
    if (!json_path->empty()) {
      std::ofstream(*json_path) << ToJson(r).dump(2) << "\n";
    }
    SetExitCode(r.error.empty() ? 0 : 1);
  });
}

}  // namespace tandem::cli
