#include "bench/agentic.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unistd.h>

#include "bench/agentic_shared.h"
#include "common/env.h"
#include "loadgen/agentic.h"
#include "loadgen/differential.h"
#include "loadgen/report.h"
#include "loadgen/soak.h"
#include "loadgen/trace.h"
#include "loadgen/verify.h"

namespace tandem::bench {
namespace {

using Json = nlohmann::json;

// --verify-during: each finished point's rounds are verified on a thread of
// its own while the next point runs, one point after another, so a long
// sweep ends verified. The reference engine then shares the machine with the
// server under test: the latencies are measured under that load.
class BackgroundVerifier {
 public:
  BackgroundVerifier(const Model& model, AttentionOptions attention, VerifyOptions options)
      : model_(model), attention_(attention), options_(std::move(options)) {
    thread_ = std::thread([this] { Run(); });
  }
  // Without Finish (an error ends the run): the queued points are dropped;
  // the point being verified finishes first.
  ~BackgroundVerifier() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.clear();
    }
    Close();
  }

  void Add(std::vector<RoundRecord> rounds) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(rounds));
    cv_.notify_all();
  }

  // Waits for every point added; their verified rounds, in the order added.
  Status Finish(std::vector<RoundRecord>* all) {
    Close();
    all->clear();
    for (auto& rounds : done_) all->insert(all->end(), rounds.begin(), rounds.end());
    return status_;
  }

 private:
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

  void Run() {
    for (;;) {
      std::vector<RoundRecord> rounds;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;
        rounds = std::move(queue_.front());
        queue_.pop_front();
      }
      if (status_.ok()) status_ = VerifyRounds(model_, attention_, &rounds, options_);
      done_.push_back(std::move(rounds));
    }
  }

  const Model& model_;
  const AttentionOptions attention_;
  const VerifyOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<RoundRecord>> queue_;
  bool closed_ = false;
  std::vector<std::vector<RoundRecord>> done_;  // the worker's until Close joins it
  Status status_;
  std::thread thread_;
};

// A one-line progress bar on stderr, only when it is a terminal.
class ProgressBar {
 public:
  ProgressBar(bool enabled, std::string label, PointProgress* p) : label_(std::move(label)), p_(p) {
    if (!enabled) return;
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Draw();
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      Draw();
      std::fprintf(stderr, "\n");
    });
  }
  ~ProgressBar() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Draw() {
    const int64_t done = p_->rounds_done.load(), total = std::max<int64_t>(1, p_->rounds_total.load());
    const int width = 30, filled = int(width * std::min<int64_t>(done, total) / total);
    std::string bar(size_t(filled), '#');
    bar.append(size_t(width - filled), '.');
    std::fprintf(stderr, "\r%s [%s] %lld/%lld rounds, %lld failed ", label_.c_str(), bar.c_str(), (long long)done,
                 (long long)total, (long long)p_->failures.load());
    std::fflush(stderr);
  }
  std::string label_;
  PointProgress* p_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A disaggregated deployment's handoff share of request time between two
// probes; -1 when the server does not report it (colocated, not tandem).
double HandoffShare(const ServerState& before, const ServerState& after) {
  const double requests = after.handoff_request_s - before.handoff_request_s;
  return requests > 0 ? (after.handoff_s - before.handoff_s) / requests : -1;
}

// The instances (host:port and start time) of `before` that `after` no
// longer shows as they were: restarted or gone. `expected`: indexes into
// `before` the schedule restarts itself (ProbeServer lists a router first,
// then its decode servers in order).
std::vector<std::string> Restarted(const std::vector<std::string>& before, const std::vector<std::string>& after,
                                   const std::vector<size_t>& expected = {}) {
  std::vector<std::string> out;
  for (size_t i = 0; i < before.size(); ++i) {
    if (std::find(expected.begin(), expected.end(), i) != expected.end()) continue;
    const std::string& b = before[i];
    if (std::find(after.begin(), after.end(), b) == after.end()) out.push_back(b + " (now: not the same process)");
  }
  return out;
}

// What a fault schedule restarts on purpose: the router (0), decode server i (1 + i).
std::vector<size_t> ScheduledRestarts(const std::vector<Fault>& faults) {
  std::vector<size_t> out;
  for (const Fault& f : faults) {
    if (f.kind == Fault::Kind::kRouterKill || f.kind == Fault::Kind::kRouterDrain) out.push_back(0);
    if (f.kind == Fault::Kind::kDecodeKill || f.kind == Fault::Kind::kDecodeDrain) out.push_back(1 + size_t(f.target));
  }
  return out;
}

// Runs the soak instead of the sweep: one point, sessions back to back while
// the fault schedule runs; the health gate before and after, and a check that
// nothing the schedule did not kill was restarted.
int Soak(const AgenticBenchOptions& a, const AgenticShape& shape, const std::string& host, int port, SweepReport* report,
         std::vector<RoundRecord>* all, std::vector<FaultEvent>* events) {
  SoakOptions o;
  o.duration_s = a.soak_s;
  o.concurrency = shape.sweep.back();
  o.settle_s = a.fault_settle_s;
  auto faults = ParseFaults(a.faults);
  if (!faults.ok()) return std::fprintf(stderr, "error: --faults: %s\n", faults.status().message().c_str()), 1;
  o.faults = RepeatFaults(*faults, a.faults_repeat_s, a.soak_s);
  if (!a.fault_control.empty() && !SplitUrl(a.fault_control, &o.control_host, &o.control_port)) {
    return std::fprintf(stderr, "error: --fault-control must be host:port, not '%s'\n", a.fault_control.c_str()), 1;
  }
  if (!a.fault_control_key_file.empty()) {
    std::ifstream in(a.fault_control_key_file);
    if (!(in >> o.control_key)) {
      return std::fprintf(stderr, "error: cannot read a key from --fault-control-key-file '%s'\n",
                          a.fault_control_key_file.c_str()), 1;
    }
  }
  SoakSection& k = report->soak_section;
  report->soak = true;
  k.duration_s = o.duration_s;
  k.concurrency = o.concurrency;
  k.faults = a.faults.empty() ? "none" : a.faults;
  if (a.faults_repeat_s > 0) k.faults += ", repeated every " + std::to_string(int64_t(a.faults_repeat_s)) + " s";
  k.settle_s = o.settle_s;
  if (const Status gate = WaitForBaseline(host, port, a.health_timeout_s); !gate.ok()) {
    report->stopped = "before the soak: " + gate.message();
    std::fprintf(stderr, "tandem bench agentic: soak not started %s\n", report->stopped.c_str());
    return 0;
  }
  const ServerState before_state = ProbeServer(host, port);
  const std::vector<std::string>& before = before_state.instances;
  std::fprintf(stderr, "  soak: %.0f s, %d sessions at a time, %zu faults scheduled\n", o.duration_s, o.concurrency,
               o.faults.size());
  PointProgress progress;
  const auto t0 = Env::Default().Now();
  if (Status st = RunSoak(host, port, report->header.model, shape, o, &progress, all, events); !st.ok()) {
    return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
  }
  const double wall = std::chrono::duration<double>(Env::Default().Now() - t0).count();
  for (const RoundRecord& r : *all) k.sessions = std::max<int64_t>(k.sessions, r.session + 1);
  report->points.push_back(Summarize(0, o.concurrency, *all, wall));
  const ServerState after_state = ProbeServer(host, port);
  report->points.back().handoff_time_share = HandoffShare(before_state, after_state);
  report->points.back().time_split = TimeSplit(before_state, after_state);
  if (const Status after = WaitForBaseline(host, port, a.health_timeout_s); !after.ok()) {
    report->stopped = "after the soak: " + after.message();
    std::fprintf(stderr, "tandem bench agentic: %s\n", report->stopped.c_str());
  }
  k.restarted = Restarted(before, ProbeServer(host, port).instances, ScheduledRestarts(o.faults));
  return 0;
}

}  // namespace

int RunAgenticBench(AgenticBenchOptions& a) {
  auto preset = AgenticPreset(a.preset);
  if (!preset.ok()) return std::fprintf(stderr, "error: %s\n", preset.status().ToString().c_str()), 1;
  AgenticShape shape = *preset;
  if (a.initial_tokens > 0) shape.initial_tokens = a.initial_tokens;
  if (a.rounds > 0) shape.rounds = a.rounds;
  if (a.gen_tokens > 0) shape.gen_tokens = a.gen_tokens;
  if (a.think_ms >= 0) shape.think_ms = a.think_ms;
  if (a.request_timeout_s > 0) shape.request_timeout_s = a.request_timeout_s;
  if (!a.sweep.empty()) shape.sweep = a.sweep;
  if (!a.tool_tokens.empty()) {
    if (a.tool_tokens.size() != 2 || a.tool_tokens[0] < 1 || a.tool_tokens[1] < a.tool_tokens[0]) {
      return std::fprintf(stderr, "error: --tool-tokens takes MIN,MAX with 1 <= MIN <= MAX\n"), 1;
    }
    shape.tool_min = a.tool_tokens[0];
    shape.tool_max = a.tool_tokens[1];
  }
  shape.seed = a.seed;
  shape.extensions = !a.plain_openai;
  for (int c : shape.sweep) {
    if (c < 1 || c > 4096) return std::fprintf(stderr, "error: --sweep points must be in [1, 4096], not %d\n", c), 1;
  }
  std::string host;
  int port = 0;
  if (!SplitUrl(a.url, &host, &port)) {
    return std::fprintf(stderr, "error: --url must be host:port (e.g. 127.0.0.1:8080), not '%s'\n", a.url.c_str()), 1;
  }
  TranscriptHeader header;
  header.preset = a.preset;
  header.shape = shape;
  if (Status st = QueryModel(host, port, &header.model, &header.server_attention, &header.server_context,
                             &header.server_chat_format, &header.server_numerics);
      !st.ok()) {
    return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
  }
  auto tpw = CalibrateTokensPerWord(host, port, header.model);
  if (!tpw.ok()) return std::fprintf(stderr, "error: %s\n", tpw.status().ToString().c_str()), 1;
  shape.tokens_per_word = header.shape.tokens_per_word = *tpw;
  std::unique_ptr<Model> reference;
  DifferentialOptions differential;
  if (!a.reference_url.empty()) {
    if (a.no_verify) return std::fprintf(stderr, "error: --reference-url and --no-verify contradict each other\n"), 1;
    if (!SplitUrl(a.reference_url, &differential.host, &differential.port)) {
      return std::fprintf(stderr, "error: --reference-url must be host:port, not '%s'\n", a.reference_url.c_str()), 1;
    }
    Json attention;
    int64_t context = 0;
    if (Status st = QueryModel(differential.host, differential.port, &differential.model, &attention, &context);
        !st.ok()) {
      return std::fprintf(stderr, "error: the reference deployment: %s\n", st.ToString().c_str()), 1;
    }
    differential.near_tie_nats = a.near_tie_nats;
  } else if (!a.no_verify) {
    auto m = LoadReference(a.model, header.model, !header.server_attention.is_null(), header.server_chat_format);
    if (!m.ok()) return std::fprintf(stderr, "error: %s\n", m.status().ToString().c_str()), 1;
    reference = std::move(m).value();
  }
  // What the oracle can claim (invariant 9), said before the sweep starts.
  NumericsJudgement numerics;
  if (reference) {
    auto attention = AttentionFromHeader(header.server_attention, AttentionOptions{});
    if (!attention.ok()) return std::fprintf(stderr, "error: %s\n", attention.status().ToString().c_str()), 1;
    auto judged = JudgeNumerics(*reference, *attention, header.server_numerics);
    if (!judged.ok()) return std::fprintf(stderr, "error: %s\n", judged.status().ToString().c_str()), 1;
    numerics = *judged;
    std::fprintf(stderr, "%s\n", numerics.note.c_str());
  }
  std::optional<Trace> trace;
  if (!a.trace.empty()) {
    if (a.soak_s > 0) return std::fprintf(stderr, "error: --trace and --soak are different workloads: pick one\n"), 1;
    TraceOptions to;
    to.format = a.trace_format;
    to.tokens_per_word = shape.tokens_per_word;
    to.length_scale = a.trace_scale;
    to.limit = a.trace_limit;
    auto loaded = LoadTrace(a.trace, to);
    if (!loaded.ok()) return std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str()), 1;
    trace = std::move(loaded).value();
    if (const double span = TraceSeconds(*trace, a.trace_speed); !(span <= a.trace_max_s)) {
      return std::fprintf(stderr,
                          "error: replaying %s at --trace-speed %g takes %.0f s of arrivals and delays, more than "
                          "--trace-max-s %.0f: raise the speed, limit the requests, or raise the limit\n",
                          a.trace.c_str(), a.trace_speed, span, a.trace_max_s),
             1;
    }
    header.preset = "trace:" + std::filesystem::path(a.trace).filename().string();
    std::fprintf(stderr, "trace %s (%s): %zu sessions, %lld requests, %lld shared prefix blocks\n", a.trace.c_str(),
                 trace->format.c_str(), trace->sessions.size(), (long long)trace->requests,
                 (long long)trace->shared_blocks);
  }
  std::error_code ec;
  std::filesystem::create_directories(a.out_dir, ec);
  if (ec) return std::fprintf(stderr, "error: cannot create %s: %s\n", a.out_dir.c_str(), ec.message().c_str()), 1;
  const std::string transcript = a.out_dir + "/transcript.jsonl";

  SweepReport report;
  report.header = header;
  report.judged_exactly = numerics.exact;
  report.reference_numerics = numerics.reference_id;
  report.numerics_note = numerics.note;
  report.target = host + ":" + std::to_string(port);
  report.transcript_path = transcript;
  const bool tty = isatty(2) && !a.quiet;
  std::fprintf(stderr,
               "tandem bench agentic: %s at %s, preset %s: %lld-token start, %d rounds of %d generated + %d..%d "
               "tool tokens (%.2f tokens per word here), sweep",
               header.model.c_str(), report.target.c_str(), a.preset.c_str(), (long long)shape.initial_tokens,
               shape.rounds, shape.gen_tokens, shape.tool_min, shape.tool_max, shape.tokens_per_word);
  for (int c : shape.sweep) std::fprintf(stderr, " %d", c);
  std::fprintf(stderr, "\n");
  if (const ServerState first = ProbeServer(host, port); !first.unchecked.empty()) {
    std::fprintf(stderr, "health gate: %s\n", first.unchecked.c_str());
  } else if (first.reachable && !first.tandem) {
    std::fprintf(stderr, "health gate: /health and /metrics, but no tandem engine gauges: idle and page checks skipped\n");
  }
  std::vector<RoundRecord> all;
  std::vector<FaultEvent> events;
  std::unique_ptr<BackgroundVerifier> during;
  if (a.verify_during && reference) {
    auto attention = AttentionFromHeader(header.server_attention, AttentionOptions{});
    if (!attention.ok()) return std::fprintf(stderr, "error: %s\n", attention.status().ToString().c_str()), 1;
    VerifyOptions vo;
    vo.exact = numerics.exact;
    vo.near_tie_nats = a.near_tie_nats;
    vo.threads = a.model.threads;
    vo.model_id = header.model;
    vo.server_context = header.server_context;
    if (!a.quiet) vo.on_progress = VerifyProgressPrinter(false);
    during = std::make_unique<BackgroundVerifier>(*reference, *attention, vo);
  }
  if (a.soak_s > 0) {
    if (int rc = Soak(a, shape, host, port, &report, &all, &events); rc != 0) return rc;
    if (during) during->Add(all);
    if (Status st = WriteTranscript(transcript, header, all); !st.ok()) {
      return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    }
  }
  if (trace) {
    PointProgress progress;
    const ServerState before = ProbeServer(host, port);
    const auto t0 = Env::Default().Now();
    std::vector<RoundRecord> recs;
    {
      ProgressBar bar(tty, "  trace", &progress);
      recs = RunTrace(host, port, header.model, *trace, shape, 0, a.trace_workers, a.trace_speed, &progress);
    }
    const double wall = std::chrono::duration<double>(Env::Default().Now() - t0).count();
    PointSummary s = Summarize(0, a.trace_workers, recs, wall);
    const ServerState after = ProbeServer(host, port);
    s.handoff_time_share = HandoffShare(before, after);
    s.time_split = TimeSplit(before, after);
    std::fprintf(stderr, "  trace: %lld requests in %.1f s, %.1f tok/s, TTFT p50 %.1f ms, prefix hit %.1f%%\n",
                 (long long)s.rounds, wall, s.tokens_per_s, s.ttft_p50_s * 1e3,
                 s.prompt_tokens > 0 ? 100.0 * double(s.cached_tokens) / double(s.prompt_tokens) : 0.0);
    report.points.push_back(std::move(s));
    if (during) during->Add(recs);
    all.insert(all.end(), std::make_move_iterator(recs.begin()), std::make_move_iterator(recs.end()));
    if (Status st = WriteTranscript(transcript, header, all); !st.ok()) {
      return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    }
  }
  for (size_t i = 0; !trace && a.soak_s <= 0 && i < shape.sweep.size(); ++i) {
    const int c = shape.sweep[i];
    const Status gate = WaitForBaseline(host, port, a.health_timeout_s);
    if (!gate.ok()) {
      report.stopped = "before the " + std::to_string(c) + "-session point: " + gate.message() +
                       ". Not measuring a server that has not recovered; restart it and rerun.";
      std::fprintf(stderr, "tandem bench agentic: sweep stopped %s\n", report.stopped.c_str());
      break;
    }
    PointProgress progress;
    const ServerState before = ProbeServer(host, port);
    const auto t0 = Env::Default().Now();
    std::vector<RoundRecord> recs;
    {
      ProgressBar bar(tty, "  " + std::to_string(c) + " sessions", &progress);
      recs = RunPoint(host, port, header.model, shape, int(i), c, &progress);
    }
    const double wall = std::chrono::duration<double>(Env::Default().Now() - t0).count();
    PointSummary s = Summarize(int(i), c, recs, wall);
    const ServerState after = ProbeServer(host, port);
    s.handoff_time_share = HandoffShare(before, after);
    s.time_split = TimeSplit(before, after);
    std::fprintf(stderr, "  %d sessions: %lld rounds in %.1f s, %.1f tok/s, TTFT p50 %.1f ms, %lld timeout, %lld error\n",
                 c, (long long)s.rounds, wall, s.tokens_per_s, s.ttft_p50_s * 1e3, (long long)s.outcomes[kTimeout],
                 (long long)s.outcomes[kError]);
    report.points.push_back(std::move(s));
    if (during) during->Add(recs);
    all.insert(all.end(), std::make_move_iterator(recs.begin()), std::make_move_iterator(recs.end()));
    if (Status st = WriteTranscript(transcript, header, all); !st.ok()) {
      return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    }
  }
  if (report.stopped.empty() && a.soak_s <= 0) {
    const Status after = WaitForBaseline(host, port, a.health_timeout_s);
    if (!after.ok()) {
      report.stopped = "after the last point: " + after.message();
      std::fprintf(stderr, "tandem bench agentic: %s\n", report.stopped.c_str());
    }
  }
  if (!a.reference_url.empty()) {
    std::fprintf(stderr, "judging %zu rounds against the reference deployment at %s (one request at a time)\n",
                 all.size(), a.reference_url.c_str());
    const Status st = VerifyRoundsAgainstReference(differential, &all, a.quiet ? nullptr : VerifyProgressPrinter(tty));
    if (!st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    report.verified = true;
    report.verified_by = a.reference_url;
    report.judged_exactly = false;
    report.numerics_note = "numerics: judged by the reference deployment's log-probabilities (drift or corrupt)";
    Resummarize(&report, all);
    if (Status w = WriteTranscript(transcript, header, all); !w.ok()) {
      return std::fprintf(stderr, "error: %s\n", w.ToString().c_str()), 1;
    }
  } else if (during) {
    std::fprintf(stderr, "waiting for the verification of the last point (it ran during the sweep)\n");
    if (Status st = during->Finish(&all); !st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    report.verified = true;
    Resummarize(&report, all);
    if (Status w = WriteTranscript(transcript, header, all); !w.ok()) {
      return std::fprintf(stderr, "error: %s\n", w.ToString().c_str()), 1;
    }
  } else if (reference) {
    auto attention = AttentionFromHeader(header.server_attention, AttentionOptions{});
    if (!attention.ok()) return std::fprintf(stderr, "error: %s\n", attention.status().ToString().c_str()), 1;
    std::fprintf(stderr, "verifying %zu rounds on the reference engine (one sequence per session, its own cache)\n",
                 all.size());
    VerifyOptions vo;
    vo.exact = numerics.exact;
    vo.near_tie_nats = a.near_tie_nats;
    vo.threads = a.model.threads;
    vo.model_id = header.model;
    vo.server_context = header.server_context;
    if (!a.quiet) vo.on_progress = VerifyProgressPrinter(tty);
    const Status st = VerifyRounds(*reference, *attention, &all, vo);
    if (!st.ok()) return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    report.verified = true;
    Resummarize(&report, all);
    if (Status w = WriteTranscript(transcript, header, all); !w.ok()) {
      return std::fprintf(stderr, "error: %s\n", w.ToString().c_str()), 1;
    }
  }
  if (report.soak) report.soak_section.windows = SoakWindows(events, all, a.soak_s, a.fault_settle_s);
  const std::string table = ReportTable(report);
  std::fputs(table.c_str(), stdout);
  std::fflush(stdout);
  if (Status st = WriteFile(a.out_dir + "/report.json", ReportJson(report).dump(2) + "\n"); !st.ok()) {
    return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
  }
  if (Status st = WriteFile(a.out_dir + "/report.svg", ReportSvg(report, all)); !st.ok()) {
    return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
  }
  std::fprintf(stderr, "wrote %s/transcript.jsonl, report.json, report.svg\n", a.out_dir.c_str());
  int64_t corrupt = 0, failed = 0, drift = 0;
  for (const auto& p : report.points) {
    for (const auto& [o, n] : p.outcomes) {
      if (o == kCorrupt) corrupt += n;
      if (o == kDrift) drift += n;
      if (o == kTimeout || o == kError) failed += n;
    }
  }
  if (report.soak) {  // a fault's own window may fail rounds; the quiet periods may not
    failed = 0;
    for (const SoakWindow& w : report.soak_section.windows) {
      if (w.fault) continue;
      for (const char* o : {kTimeout, kError}) failed += w.outcomes.count(o) ? w.outcomes.at(o) : 0;
    }
    for (const FaultEvent& e : events) failed += e.error.empty() ? 0 : 1;
  }
  if (corrupt > 0) return kExitCorrupt;  // the finding that matters most
  if (!report.stopped.empty() || !report.soak_section.restarted.empty()) return kExitStopped;
  if (failed > 0) return kExitFailed;
  // Across numerics identities nothing was judged bit for bit: say so in the exit code too.
  if (report.verified && (drift > 0 || (!report.judged_exactly && report.verified_by.empty()))) return kExitDrift;
  return 0;
}

}  // namespace tandem::bench
