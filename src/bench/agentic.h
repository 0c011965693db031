// `tandem bench agentic`: the multi-turn agent workload against an
// OpenAI-compatible server, a sweep of concurrency points behind a health
// gate, transcripts, the exact oracle, and the report (table, JSON, SVG).
// (`tandem verify TRANSCRIPT`, the oracle alone, is in cmd_verify.cc.)
//
// Exit codes: 0 every round answered and (unless --no-verify) verified
// identical, the server healthy throughout; 1 bad usage or an error; 3 the
// oracle found corrupt answers; 4 the health gate stopped the sweep (or the
// server did not recover after it); 5 rounds timed out or failed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_source.h"

namespace tandem::bench {

struct AgenticBenchOptions {
  ModelSource model;  // the reference model for verification
  std::string url;
  std::string preset = "small";
  int64_t initial_tokens = -1;
  int rounds = -1, gen_tokens = -1, think_ms = -1;
  std::vector<int> tool_tokens;
  std::vector<int> sweep;
  uint64_t seed = 1;
  double request_timeout_s = -1;
  double health_timeout_s = 60;
  std::string out_dir = "agentic-report";
  bool no_verify = false;
  std::string reference_url;  // differential oracle: a reference deployment instead of the reference engine
  double near_tie_nats = 0.5;
  bool quiet = false;
  bool plain_openai = false;
  // A published trace instead of the preset's sessions (loadgen/trace.h).
  std::string trace, trace_format;
  double trace_speed = 1, trace_scale = 1;
  int64_t trace_limit = 0;
  int trace_workers = 64;
  double trace_max_s = 3600;
  // The soak (loadgen/soak.h): sessions back to back at the last sweep value.
  double soak_s = 0;
  std::string faults;
  double faults_repeat_s = 0;
  std::string fault_control;  // host:port of serve --disagg --debug-fault-control
  std::string fault_control_key_file;  // the key it wrote
  double fault_settle_s = 10;
  bool verify_during = false;
};

int RunAgenticBench(AgenticBenchOptions& a);

}  // namespace tandem::bench
