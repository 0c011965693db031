#include "loadgen/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loadgen/stream_client.h"
#include "loadgen/text_format.h"

namespace tandem {

using Json = nlohmann::json;
using report_text::Fmt;

namespace {

constexpr const char* kOutcomes[] = {kOk, kDrift, kCorrupt, kTimeout, kError, kUnverified};

void CountOutcomes(PointSummary* s, const std::vector<RoundRecord>& rounds) {
  s->outcomes.clear();
  for (const char* o : kOutcomes) s->outcomes[o] = 0;
  s->first_mismatches.clear();
  s->drifts.clear();
  for (const RoundRecord& r : rounds) {
    if (r.point != s->point) continue;
    ++s->outcomes[r.outcome];
    if (r.outcome == kDrift && s->drifts.size() < 20) {
      const size_t at = r.verify_note.find(" nats");
      const size_t open = r.verify_note.rfind('(', at);
      const std::string margin =
          at != std::string::npos && open != std::string::npos ? r.verify_note.substr(open, at + 5 - open) + ")" : "";
      s->drifts.push_back("session " + std::to_string(r.session) + " round " + std::to_string(r.round) + ": token " +
                          std::to_string(r.first_mismatch) + (margin.empty() ? "" : " " + margin));
    }
    if (r.outcome == kCorrupt && s->first_mismatches.size() < 20) {
      s->first_mismatches.push_back("session " + std::to_string(r.session) + " round " + std::to_string(r.round) +
                                    ": token " + std::to_string(r.first_mismatch));
    }
  }
}

}  // namespace

PointSummary Summarize(int point, int concurrency, const std::vector<RoundRecord>& rounds, double wall_s) {
  PointSummary s;
  s.point = point;
  s.concurrency = concurrency;
  s.wall_s = wall_s;
  std::vector<double> ttft, itl, e2e;
  int64_t generated = 0, later_prompt = 0, later_cached = 0;
  for (const RoundRecord& r : rounds) {
    if (r.point != point) continue;
    ++s.rounds;
    if (r.outcome == kTimeout || r.outcome == kError) continue;
    ttft.push_back(r.ttft_s);
    e2e.push_back(r.e2e_s);
    itl.insert(itl.end(), r.gaps_s.begin(), r.gaps_s.end());
    generated += r.completion_tokens;
    s.prompt_tokens += r.prompt_tokens;
    s.cached_tokens += r.cached_tokens;
    s.max_prompt_tokens = std::max(s.max_prompt_tokens, r.prompt_tokens);
    if (r.round >= 1) {
      later_prompt += r.prompt_tokens;
      later_cached += r.cached_tokens;
    }
  }
  s.ttft_p50_s = Percentile(ttft, 50);
  s.ttft_p99_s = Percentile(ttft, 99);
  s.itl_p50_s = Percentile(itl, 50);
  s.itl_p99_s = Percentile(itl, 99);
  s.e2e_p50_s = Percentile(e2e, 50);
  s.tokens_per_s = wall_s > 0 ? double(generated) / wall_s : 0;
  s.later_round_hit_rate = later_prompt > 0 ? double(later_cached) / double(later_prompt) : 0;
  CountOutcomes(&s, rounds);
  return s;
}

std::map<std::string, double> TimeSplit(const ServerState& before, const ServerState& after) {
  std::map<std::string, double> out;
  const double total = after.handoff_request_s - before.handoff_request_s;
  if (!(total > 0)) return out;
  for (const auto& [phase, s] : after.phase_s) {
    const auto it = before.phase_s.find(phase);
    const double d = s - (it == before.phase_s.end() ? 0 : it->second);
    if (d > 0) out[phase] = d / total;
  }
  return out;
}

void Resummarize(SweepReport* report, const std::vector<RoundRecord>& rounds) {
  for (PointSummary& p : report->points) CountOutcomes(&p, rounds);
}

// The soak's windows: outcomes in each fault window and quiet period, and
// how long the system took to answer again after each fault.
std::string SoakTable(const SoakSection& k) {
  std::string out = Fmt("soak: %.0f s at %d sessions (%lld sessions run), faults: ", k.duration_s, k.concurrency,
                        (long long)k.sessions) +
                    k.faults + Fmt(" (a fault's window runs %.0f s past its end)\n", k.settle_s);
  char line[512];
  std::snprintf(line, sizeof(line), "%-7s %8s %8s | %5s %5s %7s %7s %5s %10s | %9s %9s  %s\n", "window", "from s",
                "to s", "ok", "drift", "corrupt", "timeout", "error", "unverified", "healthy s", "answer s", "fault");
  out += line;
  for (const SoakWindow& w : k.windows) {
    auto n = [&](const char* o) {
      auto it = w.outcomes.find(o);
      return (long long)(it == w.outcomes.end() ? 0 : it->second);
    };
    const std::string healthy = w.fault ? (w.healthy_after_s < 0 ? "never" : Fmt("%.2f", w.healthy_after_s)) : "";
    const std::string answer = w.fault ? (w.recovery_s < 0 ? "never" : Fmt("%.2f", w.recovery_s)) : "";
    std::snprintf(line, sizeof(line), "%-7s %8.1f %8.1f | %5lld %5lld %7lld %7lld %5lld %10lld | %9s %9s  %s\n",
                  w.fault ? "FAULT" : "quiet", w.from_s, w.to_s, n(kOk), n(kDrift), n(kCorrupt), n(kTimeout), n(kError),
                  n(kUnverified), healthy.c_str(), answer.c_str(), w.fault ? w.label.c_str() : "");
    out += line;
  }
  for (const std::string& p : k.restarted) out += "RESTARTED WITHOUT A FAULT: " + p + "\n";
  return out;
}

std::string ReportTable(const SweepReport& r) {
  std::string out;
  out += "agentic sweep against " + r.target + " (" + r.header.model + ", preset " + r.header.preset + ")" +
         (!r.verified              ? std::string(", NOT verified")
          : r.verified_by.empty() ? std::string(", every answer verified against the reference engine")
                                  : ", every greedy answer judged against the reference deployment at " + r.verified_by) +
         "\n";
  char line[512];
  if (!r.numerics_note.empty()) out += r.numerics_note + "\n";
  std::snprintf(line, sizeof(line), "%5s %6s | %5s %5s %7s %7s %5s %10s | %8s %8s | %7s %7s | %8s | %6s %6s %8s\n",
                "conc", "rounds", "ok", "drift", "corrupt", "timeout", "error", "unverified", "TTFTp50", "TTFTp99",
                "ITLp50", "ITLp99", "tok/s", "hit%", "ctxmax", "handoff%");
  out += line;
  std::snprintf(line, sizeof(line), "%5s %6s | %5s %5s %7s %7s %5s %10s | %8s %8s | %7s %7s | %8s | %6s %6s %8s\n", "",
                "", "", "", "", "", "", "", "ms", "ms", "ms", "ms", "", "r>=1", "tokens", "of time");
  out += line;
  for (const PointSummary& p : r.points) {
    auto n = [&](const char* o) {
      auto it = p.outcomes.find(o);
      return (long long)(it == p.outcomes.end() ? 0 : it->second);
    };
    std::snprintf(line, sizeof(line),
                  "%5d %6lld | %5lld %5lld %7lld %7lld %5lld %10lld | %8.1f %8.1f | %7.2f %7.2f | %8.1f | %6.1f %6lld %8s\n",
                  p.concurrency, (long long)p.rounds, n(kOk), n(kDrift), n(kCorrupt), n(kTimeout), n(kError),
                  n(kUnverified),
                  p.ttft_p50_s * 1e3, p.ttft_p99_s * 1e3, p.itl_p50_s * 1e3, p.itl_p99_s * 1e3, p.tokens_per_s,
                  p.later_round_hit_rate * 100, (long long)p.max_prompt_tokens,
                  p.handoff_time_share < 0 ? "-" : Fmt("%.1f", p.handoff_time_share * 100).c_str());
    out += line;
    if (!p.time_split.empty()) {
      // Where the requests' time went: the prefill queue, not "the handoff", is usually the cost.
      std::string split = "      time:";
      double sum = 0;
      for (const char* phase : {"prefill_queue", "prefill_compute", "transfer", "commit", "decode", "page_wait",
                                "failed_attempts", "local", "abandoned", "other"}) {
        auto it = p.time_split.find(phase);
        if (it == p.time_split.end()) continue;
        split += Fmt(" %s %.1f%%", phase, it->second * 100);
        sum += it->second;
      }
      out += split + Fmt(" (sum %.1f%%)\n", sum * 100);
    }
    for (const std::string& m : p.first_mismatches) out += "      corrupt: " + m + "\n";
    for (const std::string& m : p.drifts) out += "      drift: " + m + "\n";
  }
  if (r.soak) out += SoakTable(r.soak_section);
  if (!r.stopped.empty()) out += "SWEEP STOPPED: " + r.stopped + "\n";
  return out;
}

namespace {

// Every outcome's count, zero where there were none.
Json OutcomesJson(const std::map<std::string, int64_t>& counts) {
  Json outcomes = Json::object();
  for (const char* o : kOutcomes) {
    auto it = counts.find(o);
    outcomes[o] = it == counts.end() ? 0 : it->second;
  }
  return outcomes;
}

}  // namespace

Json ReportJson(const SweepReport& r) {
  Json points = Json::array();
  for (const PointSummary& p : r.points) {
    points.push_back({{"concurrency", p.concurrency},
                      {"rounds", p.rounds},
                      {"wall_s", p.wall_s},
                      {"outcomes", OutcomesJson(p.outcomes)},
                      {"ttft_s", {{"p50", p.ttft_p50_s}, {"p99", p.ttft_p99_s}}},
                      {"itl_s", {{"p50", p.itl_p50_s}, {"p99", p.itl_p99_s}}},
                      {"e2e_p50_s", p.e2e_p50_s},
                      {"tokens_per_s", p.tokens_per_s},
                      {"prompt_tokens", p.prompt_tokens},
                      {"cached_tokens", p.cached_tokens},
                      {"later_round_hit_rate", p.later_round_hit_rate},
                      {"handoff_time_share", p.handoff_time_share < 0 ? Json() : Json(p.handoff_time_share)},
                      {"max_prompt_tokens", p.max_prompt_tokens},
                      {"first_mismatches", p.first_mismatches},
                      {"drifts", p.drifts},
                      {"time_split", p.time_split.empty() ? Json() : Json(p.time_split)}});
  }
  Json soak;
  if (r.soak) {
    const SoakSection& k = r.soak_section;
    Json windows = Json::array();
    for (const SoakWindow& w : k.windows) {
      windows.push_back({{"kind", w.fault ? "fault" : "quiet"},
                         {"label", w.label},
                         {"from_s", w.from_s},
                         {"to_s", w.to_s},
                         {"outcomes", OutcomesJson(w.outcomes)},
                         {"healthy_after_s", w.fault && w.healthy_after_s >= 0 ? Json(w.healthy_after_s) : Json()},
                         {"answered_after_s", w.fault && w.recovery_s >= 0 ? Json(w.recovery_s) : Json()}});
    }
    soak = {{"duration_s", k.duration_s}, {"concurrency", k.concurrency}, {"sessions", k.sessions},
            {"faults", k.faults},         {"settle_s", k.settle_s},       {"windows", windows},
            {"restarted", k.restarted}};
  }
  return Json{{"schema", "tandem-agentic-report/1"},
              {"soak", soak},
              {"target", r.target},
              {"model", r.header.model},
              {"preset", r.header.preset},
              {"shape", ToJson(r.header)["shape"]},
              {"server_attention", r.header.server_attention},
              {"verified", r.verified},
              {"verified_by", r.verified_by.empty() ? Json("reference engine") : Json(r.verified_by)},
              {"numerics",
               {{"server", r.header.server_numerics},
                {"reference_id", r.reference_numerics.empty() ? Json() : Json(r.reference_numerics)},
                {"judged_exactly", r.verified && r.judged_exactly},
                {"note", r.numerics_note}}},
              {"stopped", r.stopped.empty() ? Json() : Json(r.stopped)},
              {"transcript", r.transcript_path},
              {"points", points}};
}

}  // namespace tandem
