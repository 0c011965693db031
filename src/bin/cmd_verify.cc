// `tandem verify TRANSCRIPT`: the exact oracle alone, on a transcript saved by
// `tandem bench agentic` (or judged against a reference deployment's
// logprobs with --reference-url). Exit codes as `bench agentic`'s.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "bin/attention_flags.h"
#include "bench/agentic_shared.h"
#include "bin/model_options.h"
#include "bin/shared_flags.h"
#include "bin/commands.h"
#include "loadgen/differential.h"
#include "loadgen/verify.h"

namespace tandem::cli {
namespace {

using bench::kExitCorrupt;
using bench::kExitDrift;
using bench::kExitFailed;
using bench::LoadReference;
using bench::SplitUrl;

struct VerifyArgs {
  ModelOptions model;
  std::string transcript;
  AttentionFlags attention = [] {
    AttentionFlags f;
    f.kv_dtype = "f32";  // the reference's
    return f;
  }();
  bool write = false;
  bool from_scratch = false;
  std::string reference_url;
  double near_tie_nats = 0.5;
};

// One line per session (each round's verdict in order), the totals, and the
// verification cost by round; writes the verdicts back with --write.
int PrintVerdicts(const VerifyArgs& a, const TranscriptHeader& header, const std::vector<RoundRecord>& rounds,
                  bool exact) {
  // One line per session: each round's verdict in order.
  std::map<std::pair<int, int>, std::vector<const RoundRecord*>> sessions;
  std::map<std::string, int64_t> counts;
  for (const RoundRecord& r : rounds) {
    sessions[{r.point, r.session}].push_back(&r);
    ++counts[r.outcome];
  }
  for (auto& [key, list] : sessions) {
    std::sort(list.begin(), list.end(), [](auto* x, auto* y) { return x->round < y->round; });
    std::string line = "point " + std::to_string(key.first) + " (" + std::to_string(list[0]->concurrency) +
                       " sessions) session " + std::to_string(key.second) + ":";
    for (const RoundRecord* r : list) {
      line += " r" + std::to_string(r->round) + "=" + r->outcome;
      if (r->outcome == kCorrupt || r->outcome == kDrift) line += "@token" + std::to_string(r->first_mismatch);
    }
    std::printf("%s\n", line.c_str());
  }
  std::printf("%zu rounds: %lld ok, %lld drift, %lld corrupt, %lld timeout, %lld error, %lld unverified\n",
              rounds.size(), (long long)counts[kOk], (long long)counts[kDrift], (long long)counts[kCorrupt],
              (long long)counts[kTimeout], (long long)counts[kError], (long long)counts[kUnverified]);
  for (const RoundRecord& r : rounds) {
    if (r.outcome == kDrift) {
      std::printf("drift: point %d session %d round %d: %s\n", r.point, r.session, r.round, r.verify_note.c_str());
    }
  }
  // Verification cost by round number: flat when each round computes only its new tokens.
  std::map<int, std::pair<double, int>> by_round;
  for (const RoundRecord& r : rounds) {
    if (r.verify_s > 0) by_round[r.round].first += r.verify_s, ++by_round[r.round].second;
  }
  if (!by_round.empty()) {
    const auto& [first_r, first] = *by_round.begin();
    const auto& [last_r, last] = *by_round.rbegin();
    std::printf("verification: round %d %.1f ms mean over %d sessions, round %d %.1f ms mean over %d%s\n", first_r,
                first.first / first.second * 1e3, first.second, last_r, last.first / last.second * 1e3, last.second,
                a.from_scratch ? " (from scratch)" : "");
  }
  if (a.write) {
    if (Status st = WriteTranscript(a.transcript, header, rounds); !st.ok()) {
      return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    }
  }
  if (counts[kCorrupt] > 0) return kExitCorrupt;
  if (counts[kTimeout] + counts[kError] > 0) return kExitFailed;
  if (!exact || counts[kDrift] > 0) {
    std::printf("exit %d: judged across numerics identities: %lld rounds drifted, none corrupt\n", kExitDrift,
                (long long)counts[kDrift]);
    return kExitDrift;
  }
  return 0;
}

int RunVerify(VerifyArgs& a) {
  TranscriptHeader header;
  std::vector<RoundRecord> rounds;
  if (Status st = ReadTranscript(a.transcript, &header, &rounds); !st.ok()) {
    return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
  }
  if (!a.reference_url.empty()) {
    DifferentialOptions d;
    if (!SplitUrl(a.reference_url, &d.host, &d.port)) {
      return std::fprintf(stderr, "error: --reference-url must be host:port, not '%s'\n", a.reference_url.c_str()), 1;
    }
    d.near_tie_nats = a.near_tie_nats;
    if (Status st = VerifyRoundsAgainstReference(d, &rounds, VerifyProgressPrinter(isatty(2))); !st.ok()) {
      return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
    }
    std::printf("numerics: judged by the reference deployment's log-probabilities (server %s)\n",
                header.server_numerics.is_object() && header.server_numerics.contains("id") &&
                        header.server_numerics["id"].is_string()
                    ? header.server_numerics["id"].get<std::string>().substr(0, 80).c_str()
                    : "identity not recorded");
    return PrintVerdicts(a, header, rounds, /*exact=*/true);  // drift, if any, shows in the counts
  }
  auto fallback = a.attention.Resolve();
  if (!fallback.ok()) return std::fprintf(stderr, "error: %s\n", fallback.status().ToString().c_str()), 1;
  auto attention = AttentionFromHeader(header.server_attention, *fallback);
  if (!attention.ok()) return std::fprintf(stderr, "error: %s\n", attention.status().ToString().c_str()), 1;
  auto model = LoadReference(a.model, header.model, !header.server_attention.is_null(), header.server_chat_format);
  if (!model.ok()) return std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str()), 1;
  auto numerics = JudgeNumerics(**model, *attention, header.server_numerics);
  if (!numerics.ok()) return std::fprintf(stderr, "error: %s\n", numerics.status().ToString().c_str()), 1;
  std::printf("%s\n", numerics->note.c_str());
  std::fflush(stdout);
  VerifyOptions vo;
  vo.exact = numerics->exact;
  vo.near_tie_nats = a.near_tie_nats;
  vo.threads = a.model.threads;
  vo.model_id = header.model;
  vo.server_context = header.server_context;
  vo.from_scratch = a.from_scratch;
  vo.on_progress = VerifyProgressPrinter(isatty(2));
  if (Status st = VerifyRounds(**model, *attention, &rounds, vo); !st.ok()) {
    return std::fprintf(stderr, "error: %s\n", st.ToString().c_str()), 1;
  }
  return PrintVerdicts(a, header, rounds, numerics->exact);
}

}  // namespace

void RegisterVerify(CLI::App& app) {
  auto a = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand("verify", "Replay a bench agentic transcript on the reference engine, bit for bit");
  cmd->add_option("transcript", a->transcript, "transcript.jsonl written by `tandem bench agentic`")->required();
  a->model.AddTo(cmd);
  a->attention.AddTo(cmd);
  cmd->add_flag("--write", a->write, "Write the verdicts back into the transcript");
  AddReference(cmd, &a->reference_url, &a->near_tie_nats);
  cmd->add_flag("--from-scratch", a->from_scratch,
                "Replay every round from token 0 instead of carrying each session's cache (slow; for checking)");
  cmd->callback([a] { SetExitCode(RunVerify(*a)); });
}

}  // namespace tandem::cli
