// The soak: agent sessions back to back at one concurrency for a duration,
// while a schedule of faults hits the deployment — prefill engines killed and
// restarted, stopped (wedged) and continued, restarted with bit flips in their
// page writes; decode servers killed and restarted, or drained (SIGTERM: a
// planned restart); the router killed and restarted; and abort storms of
// clients that hang up mid-request. Sessions' streams resume through the
// router when it comes back (StreamChat's resume_within_s). Every
// round is recorded (and verified afterwards like a sweep's); the report
// splits the outcomes by fault window and by the quiet periods between them,
// with the time the system took to recover after each fault.
//
// Process faults go through the launcher's fault control (`serve --disagg
// --debug-fault-control`); abort storms are made here.
#pragma once

#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "loadgen/agentic.h"

namespace tandem {

struct Fault {
  // kKill, kWedge, kBitFlips, kDrain: a prefill engine; kDecodeKill,
  // kDecodeDrain, kDecodeWedge: a decode server; kRouterKill, kRouterDrain: the router;
  // kAbortStorm: clients. A drain is a SIGTERM (the child finishes or hands
  // on what it holds and exits; the launcher starts it again): a planned restart.
  enum class Kind { kKill, kWedge, kAbortStorm, kBitFlips, kDrain, kDecodeKill, kDecodeDrain, kRouterKill, kRouterDrain,
                    kDecodeWedge };
  Kind kind = Kind::kKill;
  double at_s = 0;    // since the soak started
  // kill: down time; wedge: stopped time; bit flips, drain: the window; storm: unused
  double for_s = 0;
  int target = 0;     // the prefill engine or decode server; abort storm: requests
  double rate = 0.05; // bit flips: share of page writes with one flipped bit
};

const char* FaultName(Fault::Kind kind);
std::string DescribeFault(const Fault& f);

// "kill:0@30+5,wedge:1@90+12,abort-storm:64@150,bit-flips:0@210+30/0.05,
// drain:0@270+10,decode-kill:1@240+5,decode-drain:0@300+20,router-kill:0@360+3,router-drain:0@400+5,
// decode-wedge:0@450+15":
// KIND:TARGET@AT[+FOR][/RATE], times in seconds. Sorted by time.
StatusOr<std::vector<Fault>> ParseFaults(const std::string& text);
// The schedule again every `period_s` (0: once) while it starts before `duration_s`.
std::vector<Fault> RepeatFaults(const std::vector<Fault>& faults, double period_s, double duration_s);

// What happened when a fault ran (times since the soak started).
struct FaultEvent {
  Fault fault;
  double start_s = 0, end_s = 0;  // applied / handed back (restarted, continued, storm over)
  double healthy_s = -1;          // /health answered 200 again after end_s (-1: not seen)
  std::string error;              // the fault could not be applied, and why
};

struct SoakOptions {
  double duration_s = 600;
  int concurrency = 16;
  std::vector<Fault> faults;
  std::string control_host;  // the launcher's fault control (needed by kill, wedge, bit flips)
  int control_port = 0;
  std::string control_key;   // its key (the launcher names the file it wrote)
  double settle_s = 10;      // after a fault ends, this long still belongs to its window
};

// Runs the soak; every round sent (point 0, sessions numbered from 0 in
// order of their start) goes to *rounds, every fault to *events.
Status RunSoak(const std::string& host, int port, const std::string& model, const AgenticShape& shape,
               const SoakOptions& options, PointProgress* progress, std::vector<RoundRecord>* rounds,
               std::vector<FaultEvent>* events);

// A fault window ([start, end + settle]) or a quiet period between them.
struct SoakWindow {
  bool fault = false;
  std::string label;
  std::string short_label;  // fault windows: "kill p0", "abort-storm 64" ...
  double fault_end_s = 0;   // fault windows: when the fault was handed back (the window runs settle_s longer)
  double from_s = 0, to_s = 0;
  std::map<std::string, int64_t> outcomes;
  double recovery_s = -1;  // fault windows: end -> the first round started after it answered ok
  double healthy_after_s = -1;  // fault windows: end -> /health 200 again
};

// Assigns every round to the first fault window its [start, start + e2e]
// overlaps, or else to the quiet period it started in.
std::vector<SoakWindow> SoakWindows(const std::vector<FaultEvent>& events, const std::vector<RoundRecord>& rounds,
                                    double duration_s, double settle_s);

}  // namespace tandem
