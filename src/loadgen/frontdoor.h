// `tandem bench frontdoor`: what a front door (serve or router) does under
// the clients that break thread-per-connection servers, measured from
// outside on 127.0.0.1, each phase bounded in time:
// - idle: N connections that send nothing; the server's resident memory per
//   connection held;
// - streams: N concurrent streaming completions over P distinct prompts;
//   every answer must equal that prompt's answer alone; time to first byte,
//   and /health latency probed throughout;
// - slowloris: N connections dribbling a body; a real request's latency
//   meanwhile, and when (and how) the slow ones were closed;
// - big body: a chunked body of up to B bytes; its status and the server's
//   memory growth;
// - hang-ups: N non-streaming requests whose clients close mid-generation;
//   how long until the engine has cancelled every one and holds no pages.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <string>

namespace tandem {

struct FrontDoorOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  int engine_port = 0;  // where engine metrics are (a decode server behind a router); 0: port
  std::string api_key;
  int idle = 1000;
  int streams = 2000, prompts = 200, max_tokens = 16;
  int slowloris = 500;
  int64_t big_body_bytes = int64_t(1) << 30;
  int hang_ups = 100, hang_up_max_tokens = 100000;
  std::chrono::seconds phase_timeout{180};
  int health_timeout_s = 2;  // a /health probe slower than this counts as failed
};

struct FrontDoorReport {
  // idle
  int64_t idle_held = 0;          // open connections the server reported
  double idle_bytes_per_connection = 0;
  // streams
  int64_t streams_ok = 0, streams_equal = 0, streams_failed = 0;
  double ttfb_p50_ms = 0, ttfb_p99_ms = 0, streams_wall_s = 0;
  int64_t health_probes = 0, health_failed = 0;
  double health_p99_ms = 0, health_max_ms = 0;
  // slowloris
  int64_t slow_closed = 0, slow_got_408 = 0, slow_open_at_end = 0;
  double slow_closed_after_s_min = 0, slow_closed_after_s_max = 0;
  double request_during_slowloris_ms = 0;
  int request_during_slowloris_status = 0;
  // big body
  int big_body_status = 0;
  int64_t big_body_sent = 0;
  double big_body_rss_growth_mib = 0;
  // hang-ups
  int64_t hang_ups_running = 0;      // requests the engine held (running or queued) when the clients hung up
  int64_t hang_ups_cancelled = 0;    // tandem_requests_total{outcome="cancelled"} growth
  double hang_up_settled_ms = -1;    // until nothing runs and no page is used; -1: never (within the timeout)
  double pages_used_after = -1;
  std::string error;                 // a phase that could not run
};

FrontDoorReport RunFrontDoor(const FrontDoorOptions& options);
nlohmann::json ToJson(const FrontDoorReport& report);

}  // namespace tandem
