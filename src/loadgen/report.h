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
  std::map<std::string, int64_t> outcomes;  // ok, corrupt, timeout, error, unverified
  double ttft_p50_s = 0, ttft_p99_s = 0, itl_p50_s = 0, itl_p99_s = 0, e2e_p50_s = 0;
  double tokens_per_s = 0;              // generated tokens / wall
  int64_t prompt_tokens = 0, cached_tokens = 0;
  double later_round_hit_rate = 0;      // cached / prompt tokens over rounds >= 1
  double handoff_time_share = -1;       // disaggregated servers: the point's handoff share of request time; -1: unknown
  int64_t max_prompt_tokens = 0;
  std::vector<std::string> first_mismatches;  // "session 3 round 2: token 17", at most 20
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
  std::string stopped;  // non-empty: why the sweep stopped early (the health gate)
  std::string transcript_path;
  bool soak = false;
  SoakSection soak_section;
};

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
