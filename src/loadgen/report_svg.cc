// The report's SVG: four panels against the concurrency points and, for a
// soak, a timeline. Axes carry round tick values (1, 2, 2.5 or 5 times a
// power of ten) with the unit in the panel's title; legends sit in their own
// row above the plot; the outcome panel writes each point's corrupt count and
// share above its bar, so a small share is never a hairline nobody sees.
#include <algorithm>
#include <cmath>

#include "loadgen/report.h"
#include "loadgen/text_format.h"

namespace tandem {
namespace {

using report_text::Escape;
using report_text::Fmt;

constexpr double kPanelW = 310, kPanelH = 268, kLeft = 58, kPlotTop = 48, kPlotW = 226, kPlotH = 150;
constexpr double kTimelineW = 4 * kPanelW, kTimelineH = 270, kTimelinePlotW = kTimelineW - kLeft - 30;

struct Outcome {
  const char* name;
  const char* color;
};
constexpr Outcome kOutcomeColors[] = {
    {kOk, "#2ca02c"}, {kDrift, "#bcbd22"}, {kCorrupt, "#d62728"}, {kTimeout, "#ff7f0e"}, {kError, "#7f7f7f"}, {kUnverified, "#c7c7c7"}};

// Round ticks from 0 to at least vmax: steps of 1, 2, 2.5 or 5 x 10^k.
struct Ticks {
  double step = 1, top = 1;
  int decimals = 0;
};
Ticks NiceTicks(double vmax, int target = 4) {
  if (!(vmax > 0)) vmax = 1;
  const double raw = vmax / target, mag = std::pow(10.0, std::floor(std::log10(raw)));
  Ticks t;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    t.step = m * mag;
    if (t.step >= raw) break;
  }
  t.top = std::ceil(vmax / t.step - 1e-9) * t.step;
  t.decimals = t.step >= 1 ? 0 : int(std::ceil(-std::log10(t.step) - 1e-9)) + (std::fmod(t.step / mag, 1.0) != 0);
  return t;
}

std::string Text(double x, double y, const std::string& s, const std::string& attrs = "") {
  return "<text x=\"" + Fmt("%.1f", x) + "\" y=\"" + Fmt("%.1f", y) + "\"" + (attrs.empty() ? "" : " " + attrs) + ">" +
         Escape(s) + "</text>\n";
}

std::string Line(double x1, double y1, double x2, double y2, const std::string& stroke) {
  return Fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"", x1, y1, x2, y2) + stroke + "\"/>\n";
}

// A vertical axis from 0 to t.top over [top, top + height] with gridlines
// across `width`, labels right-aligned left of the axis.
std::string YAxis(const Ticks& t, double left, double top, double width, double height, const std::string& suffix = "") {
  std::string g;
  for (double v = 0; v <= t.top + t.step / 2; v += t.step) {
    const double y = top + height - height * v / t.top;
    g += Line(left, y, left + width, y, v == 0 ? "black" : "#e5e5e5");
    g += Text(left - 5, y + 4, Fmt("%.*f", t.decimals, v) + suffix, "text-anchor=\"end\"");
  }
  return g + Line(left, top, left, top + height, "black");
}

// A row of colored squares and names.
std::string Legend(double x, double y, const std::vector<std::pair<std::string, std::string>>& items) {
  std::string g;
  for (const auto& [name, color] : items) {
    g += Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"9\" height=\"9\" fill=\"", x, y - 8) + color + "\"/>\n";
    g += Text(x + 12, y, name);
    x += 20 + 7.2 * double(name.size());
  }
  return g;
}

class Panels {
 public:
  explicit Panels(const SweepReport& r) : r_(r), n_(r.points.size()) {}

  double X(size_t i) const { return kLeft + (n_ <= 1 ? kPlotW / 2 : kPlotW * (0.08 + 0.84 * double(i) / double(n_ - 1))); }

  std::string Begin(int panel, const std::string& title) const {
    return Fmt("<g transform=\"translate(%.0f,30)\">\n", panel * kPanelW) +
           Text(kLeft, 14, title, "font-size=\"13\" font-weight=\"bold\"");
  }

  std::string XAxis() const {
    std::string g;
    for (size_t i = 0; i < n_; ++i) {
      g += Text(X(i), kPlotTop + kPlotH + 15, std::to_string(r_.points[i].concurrency), "text-anchor=\"middle\"");
    }
    return g + Text(kLeft + kPlotW / 2, kPlotTop + kPlotH + 58, "concurrent sessions", "text-anchor=\"middle\"");
  }

  struct Series {
    std::string name, color;
    std::vector<double> v;
  };

  std::string LinePanel(int panel, const std::string& title, const std::vector<Series>& series) const {
    double vmax = 0;
    for (const auto& s : series) {
      for (double v : s.v) vmax = std::max(vmax, v);
    }
    const Ticks t = NiceTicks(vmax);
    std::string g = Begin(panel, title);
    std::vector<std::pair<std::string, std::string>> legend;
    for (const auto& s : series) legend.push_back({s.name, s.color});
    g += Legend(kLeft, 32, legend) + YAxis(t, kLeft, kPlotTop, kPlotW, kPlotH) + XAxis();
    for (const auto& s : series) {
      std::string pts;
      for (size_t i = 0; i < s.v.size(); ++i) {
        const double y = kPlotTop + kPlotH - kPlotH * s.v[i] / t.top;
        pts += Fmt("%.1f,%.1f ", X(i), y);
        g += Fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"", X(i), y) + s.color + "\"/>\n";
      }
      g += "<polyline fill=\"none\" stroke=\"" + s.color + "\" stroke-width=\"1.8\" points=\"" + pts + "\"/>\n";
    }
    return g + "</g>\n";
  }

  // Stacked shares of each point's rounds; the corrupt count and share
  // written above every bar (red when there are any).
  std::string OutcomePanel(int panel) const {
    std::string g = Begin(panel, "outcome of every round (%)");
    std::vector<std::pair<std::string, std::string>> legend;
    for (const Outcome& o : kOutcomeColors) {
      if (std::string(o.name) != kUnverified) legend.push_back({o.name, o.color});
    }
    g += Legend(kLeft - 40, 32, legend);
    g += YAxis(Ticks{25, 100, 0}, kLeft, kPlotTop, kPlotW, kPlotH) + XAxis();
    const double bar_w = n_ == 0 ? 0 : std::min(34.0, kPlotW / double(n_) * 0.6);
    for (size_t i = 0; i < n_; ++i) {
      const PointSummary& p = r_.points[i];
      double y = kPlotTop + kPlotH;
      int64_t corrupt = 0;
      for (const Outcome& o : kOutcomeColors) {
        auto it = p.outcomes.find(o.name);
        const int64_t count = it == p.outcomes.end() ? 0 : it->second;
        if (std::string(o.name) == kCorrupt) corrupt = count;
        if (count <= 0 || p.rounds <= 0) continue;
        double h = kPlotH * double(count) / double(p.rounds);
        if (std::string(o.name) == kCorrupt) h = std::max(h, 3.0);  // never thinner than a visible band
        y -= h;
        g += Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"", X(i) - bar_w / 2, y, bar_w, h) +
             o.color + "\"><title>" + std::to_string(count) + " " + o.name + "</title></rect>\n";
      }
      const double share = p.rounds > 0 ? 100.0 * double(corrupt) / double(p.rounds) : 0;
      const std::string color = corrupt > 0 ? "#d62728" : "#555555";
      const std::string style = "text-anchor=\"middle\" font-size=\"10\" fill=\"" + color + "\"" +
                                (corrupt > 0 ? " font-weight=\"bold\"" : "");
      g += Text(X(i), kPlotTop + kPlotH + 28, Fmt("%lld corrupt", (long long)corrupt), style);
      g += Text(X(i), kPlotTop + kPlotH + 40, Fmt("%.1f%%", share), style);
    }
    return g + "</g>\n";
  }

  // Stacked shares of each point's request time by phase (disaggregated
  // servers' tandem_request_phase_seconds_total): the queue, not "the
  // handoff", is where the time usually goes.
  std::string TimePanel(int panel) const {
    static constexpr Outcome kPhases[] = {{"prefill_queue", "#ff7f0e"}, {"prefill_compute", "#1f77b4"},
                                          {"transfer", "#9467bd"},      {"commit", "#8c564b"},
                                          {"decode", "#2ca02c"},        {"page_wait", "#e377c2"},
                                          {"failed_attempts", "#d62728"}, {"local", "#17becf"}, {"abandoned", "#7f7f7f"},
                                          {"other", "#c7c7c7"}};
    std::string g = Begin(panel, "where request time went (%)");
    std::vector<std::pair<std::string, std::string>> legend;
    for (const Outcome& o : kPhases) legend.push_back({o.name, o.color});
    g += Legend(kLeft - 40, 32, legend);
    g += YAxis(Ticks{25, 100, 0}, kLeft, kPlotTop, kPlotW, kPlotH) + XAxis();
    const double bar_w = n_ == 0 ? 0 : std::min(34.0, kPlotW / double(n_) * 0.6);
    for (size_t i = 0; i < n_; ++i) {
      double y = kPlotTop + kPlotH;
      for (const Outcome& o : kPhases) {
        auto it = r_.points[i].time_split.find(o.name);
        if (it == r_.points[i].time_split.end() || !(it->second > 0)) continue;
        const double h = kPlotH * std::min(it->second, 1.0);
        y -= h;
        g += Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"", X(i) - bar_w / 2, y, bar_w, h) +
             o.color + "\"><title>" + Fmt("%.1f%% ", it->second * 100) + o.name + "</title></rect>\n";
      }
      if (r_.points[i].time_split.empty()) g += Text(X(i), kPlotTop + kPlotH - 6, "n/a", "text-anchor=\"middle\"");
    }
    return g + "</g>\n";
  }

 private:
  const SweepReport& r_;
  const size_t n_;
};

// A soak's rounds over time: each round's TTFT at its start (colored by
// outcome; failed rounds on the axis), fault windows shaded and named.
std::string Timeline(const SweepReport& r, const std::vector<RoundRecord>& rounds, double oy) {
  const SoakSection& k = r.soak_section;
  double tmax = k.duration_s, vmax = 0;
  for (const RoundRecord& x : rounds) {
    tmax = std::max(tmax, x.start_s);
    vmax = std::max(vmax, x.ttft_s);
  }
  const Ticks tx = NiceTicks(tmax, 10), ty = NiceTicks(vmax);
  auto x_of = [&](double s) { return kLeft + kTimelinePlotW * s / tx.top; };
  const double top = kPlotTop, h = kTimelineH - kPlotTop - 50;
  std::string g = Fmt("<g transform=\"translate(0,%.0f)\">\n", oy) +
                  Text(kLeft, 14, "soak: time to first token of every round (s), by when it started; fault windows shaded",
                       "font-size=\"13\" font-weight=\"bold\"");
  std::vector<std::pair<std::string, std::string>> legend;
  for (const Outcome& o : kOutcomeColors) legend.push_back({o.name, o.color});
  legend.push_back({"fault window", "#f4c7c7"});
  g += Legend(kLeft, 32, legend);
  // Shaded from each fault's start to the end of its window; a solid line
  // where it began and a dashed one where it was handed back; names in
  // alternating rows so neighbours do not overlap.
  int row = 0;
  for (const SoakWindow& w : k.windows) {
    if (!w.fault) continue;
    g += Fmt("<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f4c7c7\" fill-opacity=\"0.6\"><title>",
             x_of(w.from_s), top, std::max(1.0, x_of(w.to_s) - x_of(w.from_s)), h) +
         Escape(w.label) + "</title></rect>\n";
    g += Line(x_of(w.from_s), top, x_of(w.from_s), top + h, "#a02020");
    g += Fmt("<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#a02020\" stroke-dasharray=\"3,3\"/>\n",
             x_of(w.fault_end_s), top, x_of(w.fault_end_s), top + h);
    g += Text(x_of(w.from_s) + 3, top + 11 + 12 * (row++ % 3), w.short_label, "font-size=\"10\" fill=\"#a02020\"");
  }
  g += YAxis(ty, kLeft, top, kTimelinePlotW, h);
  for (double v = 0; v <= tx.top + tx.step / 2; v += tx.step) {
    g += Line(x_of(v), top + h, x_of(v), top + h + 4, "black");
    g += Text(x_of(v), top + h + 16, Fmt("%.*f", tx.decimals, v), "text-anchor=\"middle\"");
  }
  g += Text(kLeft + kTimelinePlotW / 2, top + h + 32, "seconds since the soak started", "text-anchor=\"middle\"");
  for (const Outcome& o : kOutcomeColors) {
    const bool bad = std::string(o.name) == kCorrupt;
    for (const RoundRecord& x : rounds) {
      if (x.outcome != o.name) continue;
      const double y = top + h - h * std::min(x.ttft_s, ty.top) / ty.top;
      g += Fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"", x_of(x.start_s), y, bad ? "3.5" : "1.6") + o.color +
           "\"/>\n";
    }
  }
  return g + "</g>\n";
}

}  // namespace

std::string ReportSvg(const SweepReport& r, const std::vector<RoundRecord>& rounds) {
  const bool timeline = r.soak && !rounds.empty();
  bool split = false;
  for (const PointSummary& p : r.points) split = split || !p.time_split.empty();
  const double height = 30 + kPanelH + (timeline ? kTimelineH : 0);
  std::string svg = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += Fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
             "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
             (split ? 5 : 4) * kPanelW, height);
  svg += Text(10, 20,
              "tandem bench agentic — " + r.header.model + ", preset " + r.header.preset + ", " + r.target +
                  (r.verified ? ", verified" : ", NOT verified") + (r.stopped.empty() ? "" : " (sweep stopped)"),
              "font-size=\"15\"");
  std::vector<double> t50, t99, i50, i99, tps;
  for (const PointSummary& p : r.points) {
    t50.push_back(p.ttft_p50_s);
    t99.push_back(p.ttft_p99_s);
    i50.push_back(p.itl_p50_s * 1e3);
    i99.push_back(p.itl_p99_s * 1e3);
    tps.push_back(p.tokens_per_s);
  }
  const Panels panels(r);
  svg += panels.LinePanel(0, "time to first token (s)", {{"p50", "#1f77b4", t50}, {"p99", "#d62728", t99}});
  svg += panels.LinePanel(1, "inter-token latency (ms)", {{"p50", "#1f77b4", i50}, {"p99", "#d62728", i99}});
  svg += panels.LinePanel(2, "generated tokens per second", {{"tokens/s", "#2ca02c", tps}});
  svg += panels.OutcomePanel(3);
  if (split) svg += panels.TimePanel(4);
  if (timeline) svg += Timeline(r, rounds, 30 + kPanelH);
  return svg + "</svg>\n";
}

}  // namespace tandem
