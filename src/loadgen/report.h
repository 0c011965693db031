// The agentic sweep's report: per concurrency point, latency percentiles,
// throughput, prefix-cache reuse and the outcome mix — as a terminal table,
// a JSON document (schema: docs/agentic-report.schema.json) and an SVG chart.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/agentic.h"
#include "loadgen/soak.h"

namespace tandem {

struct PointSummary {
  int point = 0;
  int concurrency = 0;
  double wall_s = 0;  // first request sent -> last answer
  int64_t rounds = 0;
  std::map<std::string, int64_t> outcomes;  // ok, drift, corrupt, timeout, error, unverified
  double ttft_p50_s = 0, ttft_p99_s = 0, itl_p50_s = 0, itl_p99_s = 0, e2e_p50_s = 0;
  double tokens_per_s = 0;              // generated tokens / wall
  int64_t prompt_tokens = 0, cached_tokens = 0;
  double later_round_hit_rate = 0;      // cached / prompt tokens over rounds >= 1
  double handoff_time_share = -1;       // disaggregated servers: the point's handoff share of request time; -1: unknown
  // Disaggregated servers: each phase's share of the point's request time
  // (prefill_queue, prefill_compute, transfer, commit, decode, page_wait,
  // failed_attempts, local, other), from the servers' metrics; empty: unknown.
  std::map<std::string, double> time_split;
  int64_t max_prompt_tokens = 0;
  std::vector<std::string> first_mismatches;  // "session 3 round 2: token 17", at most 20
  std::vector<std::string> drifts;            // "session 3 round 2: token 17 (0.012 nats)", at most 20
};

// A soak's outcome by fault window and quiet period (loadgen/soak.h).
struct SoakSection {
  double duration_s = 0;
  int concurrency = 0;
  std::string faults;  // the schedule as given
  double settle_s = 0;
  std::vector<SoakWindow> windows;
  std::vector<std::string> restarted;  // processes the schedule did not kill that came back with a new start time
  int64_t sessions = 0;
};

struct SweepReport {
  TranscriptHeader header;
  std::string target;  // host:port
  std::vector<PointSummary> points;
  bool verified = false;
  std::string verified_by;  // "" : the reference engine (exact); else the reference deployment's URL
  // What the verdicts can claim (invariant 9; loadgen/verify.h JudgeNumerics):
  // the two identities and whether they were equal.
  bool judged_exactly = true;
  std::string reference_numerics;  // the reference's identity id ("" : not verified)
  std::string numerics_note;
  std::string stopped;  // non-empty: why the sweep stopped early (the health gate)
  std::string transcript_path;
  bool soak = false;
  SoakSection soak_section;
};

// The phases' shares of request time between two probes of a server (empty
// when it reports none).
std::map<std::string, double> TimeSplit(const ServerState& before, const ServerState& after);

PointSummary Summarize(int point, int concurrency, const std::vector<RoundRecord>& rounds, double wall_s);
// Recomputes every point's outcome counts and mismatch list (after verification).
void Resummarize(SweepReport* report, const std::vector<RoundRecord>& rounds);

std::string ReportTable(const SweepReport& report);
nlohmann::json ReportJson(const SweepReport& report);
// Four panels against the concurrency points (TTFT, inter-token latency,
// tokens/s, the outcome mix with each point's corrupt share written out) and,
// for a soak, a timeline of every round's TTFT with the fault windows shaded.
std::string ReportSvg(const SweepReport& report, const std::vector<RoundRecord>& rounds = {});

}  // namespace tandem
