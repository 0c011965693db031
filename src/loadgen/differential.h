// The differential oracle, for servers the exact oracle cannot judge (no
// token ids, another engine): each answered round's messages go to a
// reference deployment — the same model served colocated and asked one
// request at a time, the decisive test of the incident — greedily, with
// logprobs, and the served text is walked along the reference's tokens.
//
// Identical text: ok. At the first divergence the served continuation is
// looked up among the reference's top alternatives at that position:
//   - within `near_tie_nats` of the reference's own choice: a near-tie,
//     numerical drift between builds, not corruption. The round is ok (what
//     follows grew from a different prefix, so it is not judged);
//   - ranked lower, or outside the top alternatives: corruption at that
//     token, reported with its margin.
// Only greedy rounds (temperature 0) are judged; sampled ones stay unverified.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "loadgen/agentic.h"
#include "loadgen/verify.h"

namespace tandem {

struct DifferentialOptions {
  std::string host;
  int port = 0;
  std::string model;           // the reference's model id ("" : what its /v1/models lists)
  double near_tie_nats = 0.5;  // a served token this close to the reference's best is drift
  int top_logprobs = 5;
  double timeout_s = 600;      // one reference request
};

// One round against the reference. Sets outcome, first_mismatch and
// verify_note; a reference that fails or does not report logprobs makes the
// round an error (never corrupt).
void JudgeAgainstReference(const DifferentialOptions& options, const nlohmann::json& messages, RoundRecord* round);

// What the walk found, for JudgeAgainstReference and its tests. `reference`
// is the reference's choices[0].logprobs.content (any JSON: what is not an
// entry counts as none); `served` the served text and its finish reason.
struct Divergence {
  enum class Kind { kSame, kNearTie, kCorrupt, kUnjudged } kind = Kind::kSame;
  int64_t token = -1;    // index of the reference token where the texts part
  double margin = 0;     // reference best logprob - the served token's (nats)
  std::string detail;
};
Divergence Compare(const nlohmann::json& reference, const std::string& reference_text, const std::string& served,
                   const std::string& served_finish, double near_tie_nats);

// Judges every round whose outcome is unverified, ok or corrupt, one request
// at a time, in (point, session, round) order.
Status VerifyRoundsAgainstReference(const DifferentialOptions& options, std::vector<RoundRecord>* rounds,
                                    const std::function<void(const VerifyProgress&)>& on_progress = {});

}  // namespace tandem
