#include "loadgen/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "loadgen/stream_client.h"

namespace tandem {

using Json = nlohmann::json;

namespace {

const char* const kOutcomes[] = {kOk, kCorrupt, kTimeout, kError, kUnverified};

void CountOutcomes(PointSummary* s, const std::vector<RoundRecord>& rounds) {
  s->outcomes.clear();
  for (const char* o : kOutcomes) s->outcomes[o] = 0;
  s->first_mismatches.clear();
  for (const RoundRecord& r : rounds) {
    if (r.point != s->point) continue;
    ++s->outcomes[r.outcome];
    if (r.outcome == kCorrupt && s->first_mismatches.size() < 20) {
      s->first_mismatches.push_back("session " + std::to_string(r.session) + " round " + std::to_string(r.round) +
                                    ": token " + std::to_string(r.first_mismatch));
    }
  }
}

template <typename... Args>
std::string Fmt(const char* f, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, args...);
  return buf;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default:
        // XML 1.0 has no other control characters.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n' || c == '\r') out += c;
    }
  }
  return out;
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
  std::snprintf(line, sizeof(line), "%-7s %8s %8s | %5s %7s %7s %5s %10s | %9s %9s  %s\n", "window", "from s", "to s", "ok",
                "corrupt", "timeout", "error", "unverified", "healthy s", "answer s", "fault");
  out += line;
  for (const SoakWindow& w : k.windows) {
    auto n = [&](const char* o) {
      auto it = w.outcomes.find(o);
      return (long long)(it == w.outcomes.end() ? 0 : it->second);
    };
    const std::string healthy = w.fault ? (w.healthy_after_s < 0 ? "never" : Fmt("%.2f", w.healthy_after_s)) : "";
    const std::string answer = w.fault ? (w.recovery_s < 0 ? "never" : Fmt("%.2f", w.recovery_s)) : "";
    std::snprintf(line, sizeof(line), "%-7s %8.1f %8.1f | %5lld %7lld %7lld %5lld %10lld | %9s %9s  %s\n",
                  w.fault ? "FAULT" : "quiet", w.from_s, w.to_s, n(kOk), n(kCorrupt), n(kTimeout), n(kError),
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
  std::snprintf(line, sizeof(line), "%5s %6s | %5s %7s %7s %5s %10s | %8s %8s | %7s %7s | %8s | %6s %6s\n", "conc",
                "rounds", "ok", "corrupt", "timeout", "error", "unverified", "TTFTp50", "TTFTp99", "ITLp50", "ITLp99",
                "tok/s", "hit%", "ctxmax");
  out += line;
  std::snprintf(line, sizeof(line), "%5s %6s | %5s %7s %7s %5s %10s | %8s %8s | %7s %7s | %8s | %6s %6s\n", "", "", "",
                "", "", "", "", "ms", "ms", "ms", "ms", "", "r>=1", "tokens");
  out += line;
  for (const PointSummary& p : r.points) {
    auto n = [&](const char* o) {
      auto it = p.outcomes.find(o);
      return (long long)(it == p.outcomes.end() ? 0 : it->second);
    };
    std::snprintf(line, sizeof(line),
                  "%5d %6lld | %5lld %7lld %7lld %5lld %10lld | %8.1f %8.1f | %7.2f %7.2f | %8.1f | %6.1f %6lld\n",
                  p.concurrency, (long long)p.rounds, n(kOk), n(kCorrupt), n(kTimeout), n(kError), n(kUnverified),
                  p.ttft_p50_s * 1e3, p.ttft_p99_s * 1e3, p.itl_p50_s * 1e3, p.itl_p99_s * 1e3, p.tokens_per_s,
                  p.later_round_hit_rate * 100, (long long)p.max_prompt_tokens);
    out += line;
    for (const std::string& m : p.first_mismatches) out += "      corrupt: " + m + "\n";
  }
  if (r.soak) out += SoakTable(r.soak_section);
  if (!r.stopped.empty()) out += "SWEEP STOPPED: " + r.stopped + "\n";
  return out;
}

Json ReportJson(const SweepReport& r) {
  Json points = Json::array();
  for (const PointSummary& p : r.points) {
    Json outcomes = Json::object();
    for (const char* o : kOutcomes) {
      auto it = p.outcomes.find(o);
      outcomes[o] = it == p.outcomes.end() ? 0 : it->second;
    }
    points.push_back({{"concurrency", p.concurrency},
                      {"rounds", p.rounds},
                      {"wall_s", p.wall_s},
                      {"outcomes", outcomes},
                      {"ttft_s", {{"p50", p.ttft_p50_s}, {"p99", p.ttft_p99_s}}},
                      {"itl_s", {{"p50", p.itl_p50_s}, {"p99", p.itl_p99_s}}},
                      {"e2e_p50_s", p.e2e_p50_s},
                      {"tokens_per_s", p.tokens_per_s},
                      {"prompt_tokens", p.prompt_tokens},
                      {"cached_tokens", p.cached_tokens},
                      {"later_round_hit_rate", p.later_round_hit_rate},
                      {"max_prompt_tokens", p.max_prompt_tokens},
                      {"first_mismatches", p.first_mismatches}});
  }
  Json soak;
  if (r.soak) {
    const SoakSection& k = r.soak_section;
    Json windows = Json::array();
    for (const SoakWindow& w : k.windows) {
      Json outcomes = Json::object();
      for (const char* o : kOutcomes) {
        auto it = w.outcomes.find(o);
        outcomes[o] = it == w.outcomes.end() ? 0 : it->second;
      }
      windows.push_back({{"kind", w.fault ? "fault" : "quiet"},
                         {"label", w.label},
                         {"from_s", w.from_s},
                         {"to_s", w.to_s},
                         {"outcomes", outcomes},
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
              {"stopped", r.stopped.empty() ? Json() : Json(r.stopped)},
              {"transcript", r.transcript_path},
              {"points", points}};
}

// Four panels side by side: TTFT, inter-token latency, tokens/s, outcome mix,
// each against the sweep's concurrency points.
std::string ReportSvg(const SweepReport& r) {
  constexpr double kPanelW = 300, kPanelH = 220, kLeft = 56, kTop = 40, kPlotW = 220, kPlotH = 140;
  const size_t n = r.points.size();
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Fmt("%.0f", 4 * kPanelW) + "\" height=\"" +
         Fmt("%.0f", kPanelH + 40) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  svg += "<text x=\"10\" y=\"18\" font-size=\"14\">" +
         Escape("tandem bench agentic — " + r.header.model + ", preset " + r.header.preset + ", " + r.target) +
         (r.stopped.empty() ? "" : " (sweep stopped)") + "</text>\n";
  auto x_of = [&](size_t i) { return kLeft + (n <= 1 ? kPlotW / 2 : kPlotW * double(i) / double(n - 1)); };
  struct Series {
    std::string name, color;
    std::vector<double> v;
  };
  auto line_panel = [&](int panel, const std::string& title, const std::string& unit, const std::vector<Series>& series) {
    const double ox = panel * kPanelW;
    double vmax = 0;
    for (const auto& s : series) {
      for (double v : s.v) vmax = std::max(vmax, v);
    }
    if (vmax <= 0) vmax = 1;
    std::string g = "<g transform=\"translate(" + Fmt("%.0f", ox) + ",20)\">\n";
    g += "<text x=\"" + Fmt("%.0f", kLeft) + "\" y=\"12\" font-size=\"12\">" + Escape(title) + "</text>\n";
    g += "<line x1=\"" + Fmt("%.1f", kLeft) + "\" y1=\"" + Fmt("%.1f", kTop + kPlotH) + "\" x2=\"" +
         Fmt("%.1f", kLeft + kPlotW) + "\" y2=\"" + Fmt("%.1f", kTop + kPlotH) + "\" stroke=\"black\"/>\n";
    g += "<line x1=\"" + Fmt("%.1f", kLeft) + "\" y1=\"" + Fmt("%.1f", kTop) + "\" x2=\"" + Fmt("%.1f", kLeft) +
         "\" y2=\"" + Fmt("%.1f", kTop + kPlotH) + "\" stroke=\"black\"/>\n";
    g += "<text x=\"4\" y=\"" + Fmt("%.1f", kTop + 4) + "\">" + Escape(Fmt("%.3g", vmax) + " " + unit) + "</text>\n";
    g += "<text x=\"4\" y=\"" + Fmt("%.1f", kTop + kPlotH) + "\">0</text>\n";
    for (size_t i = 0; i < n; ++i) {
      g += "<text x=\"" + Fmt("%.1f", x_of(i) - 6) + "\" y=\"" + Fmt("%.1f", kTop + kPlotH + 14) + "\">" +
           std::to_string(r.points[i].concurrency) + "</text>\n";
    }
    g += "<text x=\"" + Fmt("%.1f", kLeft + kPlotW / 2 - 30) + "\" y=\"" + Fmt("%.1f", kTop + kPlotH + 28) +
         "\">sessions</text>\n";
    int legend = 0;
    for (const auto& s : series) {
      std::string pts;
      for (size_t i = 0; i < s.v.size(); ++i) {
        const double y = kTop + kPlotH - kPlotH * s.v[i] / vmax;
        pts += Fmt("%.1f", x_of(i)) + "," + Fmt("%.1f", y) + " ";
        g += "<circle cx=\"" + Fmt("%.1f", x_of(i)) + "\" cy=\"" + Fmt("%.1f", y) + "\" r=\"2.5\" fill=\"" + s.color +
             "\"/>\n";
      }
      g += "<polyline fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"1.5\" points=\"" + pts + "\"/>\n";
      g += "<text x=\"" + Fmt("%.1f", kLeft + 8 + 70 * legend++) + "\" y=\"" + Fmt("%.1f", kTop - 6) + "\" fill=\"" +
           s.color + "\">" + Escape(s.name) + "</text>\n";
    }
    return g + "</g>\n";
  };
  std::vector<double> t50, t99, i50, i99, tps;
  for (const PointSummary& p : r.points) {
    t50.push_back(p.ttft_p50_s * 1e3);
    t99.push_back(p.ttft_p99_s * 1e3);
    i50.push_back(p.itl_p50_s * 1e3);
    i99.push_back(p.itl_p99_s * 1e3);
    tps.push_back(p.tokens_per_s);
  }
  svg += line_panel(0, "time to first token", "ms", {{"p50", "#1f77b4", t50}, {"p99", "#d62728", t99}});
  svg += line_panel(1, "inter-token latency", "ms", {{"p50", "#1f77b4", i50}, {"p99", "#d62728", i99}});
  svg += line_panel(2, "generated tokens/s", "tok/s", {{"tokens/s", "#2ca02c", tps}});
  // Outcome mix: stacked bars, shares of each point's rounds.
  const std::pair<const char*, const char*> colors[] = {
      {kOk, "#2ca02c"}, {kCorrupt, "#d62728"}, {kTimeout, "#ff7f0e"}, {kError, "#7f7f7f"}, {kUnverified, "#c7c7c7"}};
  std::string g = "<g transform=\"translate(" + Fmt("%.0f", 3 * kPanelW) + ",20)\">\n";
  g += "<text x=\"" + Fmt("%.0f", kLeft) + "\" y=\"12\" font-size=\"12\">outcome mix</text>\n";
  const double bar_w = n == 0 ? 0 : std::min(36.0, kPlotW / double(n) * 0.7);
  for (size_t i = 0; i < n; ++i) {
    const PointSummary& p = r.points[i];
    double y = kTop + kPlotH;
    for (const auto& [o, color] : colors) {
      auto it = p.outcomes.find(o);
      const double share = p.rounds > 0 && it != p.outcomes.end() ? double(it->second) / double(p.rounds) : 0;
      if (share <= 0) continue;
      const double h = kPlotH * share;
      y -= h;
      g += "<rect x=\"" + Fmt("%.1f", x_of(i) - bar_w / 2) + "\" y=\"" + Fmt("%.1f", y) + "\" width=\"" +
           Fmt("%.1f", bar_w) + "\" height=\"" + Fmt("%.1f", h) + "\" fill=\"" + color + "\"><title>" +
           std::to_string(it->second) + " " + o + "</title></rect>\n";
    }
    g += "<text x=\"" + Fmt("%.1f", x_of(i) - 6) + "\" y=\"" + Fmt("%.1f", kTop + kPlotH + 14) + "\">" +
         std::to_string(p.concurrency) + "</text>\n";
  }
  int legend = 0;
  for (const auto& [o, color] : colors) {
    g += "<rect x=\"" + Fmt("%.1f", kLeft + 48.0 * legend) + "\" y=\"" + Fmt("%.1f", kTop - 16) +
         "\" width=\"8\" height=\"8\" fill=\"" + color + "\"/><text x=\"" + Fmt("%.1f", kLeft + 48.0 * legend + 10) +
         "\" y=\"" + Fmt("%.1f", kTop - 8) + "\" font-size=\"9\">" + o + "</text>\n";
    ++legend;
  }
  svg += g + "</g>\n</svg>\n";
  return svg;
}

}  // namespace tandem
