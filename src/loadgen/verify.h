// The exact corruption oracle: every answered round of an agentic transcript
// is replayed on the reference engine — one sequence, no handoff, none of the
// server's caches — and must match what the server sent bit for bit.
//
// With the server's token ids the replay is teacher-forced: the prompt and
// the served tokens run through the forward pass in chunks, logits for every
// output position, and the sampler draws each position's token from those
// logits with the served history. Invariant 5 (chunking and batching never
// change a token's logits) and counter-based sampling make that the same
// computation as generating one token at a time, so the first position where
// the drawn token differs from the served one is exactly the first token the
// server got wrong. Without token ids (another server) the reference
// generates freely and texts are compared.
//
// Across numerics identities (invariant 9: the transcript's server ran
// another build, a mixed deployment, or did not say) bits are not expected to
// match, so a differing token is judged by the reference's log-probabilities
// at its position instead: a near-tie of the reference's own choice (within
// `near_tie_nats`) is drift, anything further is corruption. Teacher forcing
// lets every position be judged this way, not only the first divergence.
//
// Linear time: a session's rounds are judged in order on one ReferenceSession
// that keeps the K/V (and index-K) of every token the reference itself has
// computed and checked; each round computes only the tokens past the longest
// common prefix with the previous round's sequence. By invariant 5 that is
// the same bits as replaying from token 0 (VerifyOptions::from_scratch does,
// for checking), so a round costs its new tokens, not the whole context.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "cache/page_pool.h"
#include "common/thread_pool.h"
#include "loadgen/agentic.h"
#include "model/cache_spec.h"
#include "model/model.h"
#include "server/openai_api.h"

namespace tandem {

// One session's sequence on the reference engine, carried from round to
// round: tokens() are the positions whose cache rows its pages hold, all
// computed by the reference engine (never taken from the server).
class ReferenceSession {
 public:
  ReferenceSession() = default;
  ~ReferenceSession() { Reset(); }
  ReferenceSession(const ReferenceSession&) = delete;
  ReferenceSession& operator=(const ReferenceSession&) = delete;

  // Room for at least `tokens` positions, keeping what is cached when it
  // already fits; else a fresh, empty pool of that size.
  Status Reserve(const CacheSpec& spec, int n_layers, int64_t tokens);
  void Reset();

  const std::vector<int32_t>& tokens() const { return tokens_; }
  PagePool& pool() { return *pool_; }
  std::span<const int32_t> pages() const { return pages_; }
  int64_t capacity_tokens() const { return int64_t(pages_.size()) * kPageTokens; }
  // Keeps the first n cached positions, forgets the rest.
  void Truncate(int64_t n) { tokens_.resize(size_t(std::min<int64_t>(n, int64_t(tokens_.size())))); }
  // Positions [tokens().size(), to) of seq are now cached.
  // REQUIRES: tokens() is a prefix of seq.
  void Extend(std::span<const int32_t> seq, int64_t to) {
    tokens_.insert(tokens_.end(), seq.begin() + int64_t(tokens_.size()), seq.begin() + to);
  }

 private:
  std::unique_ptr<PagePool> pool_;
  std::vector<int32_t> pages_;
  std::vector<int32_t> tokens_;
};

class ReferenceVerifier {
 public:
  // ctx_tokens: the largest prompt + output to replay.
  // exact: the server's numerics identity equals the reference's (every
  // token must match); else differing tokens are judged by near_tie_nats.
  ReferenceVerifier(const Model& model, const CacheSpec& spec, ThreadPool& threads, int64_t ctx_tokens,
                    const std::string& model_id, bool exact = true, double near_tie_nats = 0.5);

  // Judges one answered round given the messages its request carried. Sets
  // outcome (ok / corrupt), first_mismatch and verify_note; a round the
  // reference cannot replay (its request no longer parses, it does not fit,
  // the reference fails) becomes an error, never corrupt. With a session,
  // the tokens it holds from earlier rounds are reused and the ones this
  // round computes are kept; without one the round is replayed from token 0.
  // Returns the tokens this round ran through the forward pass.
  int64_t Judge(const nlohmann::json& messages, RoundRecord* round, ReferenceSession* session = nullptr);

 private:
  enum class Verdict { kSame, kDrift, kDiffers, kUnjudged, kNotReplayed };
  Verdict JudgeTokens(const ParsedRequest& req, RoundRecord* round, ReferenceSession& session, int64_t* computed);
  Verdict JudgeText(const ParsedRequest& req, RoundRecord* round, int64_t* computed);
  // The served ids must spell the served text (a decoder that loses bytes
  // after a handoff corrupts the text, not the ids).
  Verdict CheckTextMatchesIds(const ParsedRequest& req, RoundRecord* round);

  const Model& model_;
  CacheSpec spec_;
  ThreadPool& threads_;
  int64_t ctx_tokens_;
  ModelInfo info_;
  bool exact_;
  double near_tie_nats_;
};

// What a verification of a transcript can claim (invariant 9).
struct NumericsJudgement {
  bool exact = false;        // equal identities: judged bit for bit
  std::string server_id;     // "" : the server (or an older transcript) did not say
  std::string reference_id;  // this build's, for the reference model and attention
  std::string note;          // one line for reports: the two ids, and what differs
};
// Compares the server's identity (a transcript header's server_numerics, or
// null) with the reference's: `reference` under `attention` on this build's kernels.
StatusOr<NumericsJudgement> JudgeNumerics(const Model& reference, const AttentionOptions& attention,
                                          const nlohmann::json& server_numerics);

// The attention options a transcript's server reported (header
// server_attention), or `fallback` when it reported none.
StatusOr<AttentionOptions> AttentionFromHeader(const nlohmann::json& server_attention,
                                               const AttentionOptions& fallback);

// A transcript's rounds by (point, session), each session's in round order.
using SessionRounds = std::map<std::pair<int, int>, std::vector<RoundRecord*>>;
// Fails naming the first session with a missing round (its messages could not be rebuilt).
StatusOr<SessionRounds> GroupSessions(std::vector<RoundRecord>* rounds);
// Verification judges these (timeouts and errors stay what they are).
inline bool Judgeable(const RoundRecord& r) {
  return r.outcome == kUnverified || r.outcome == kOk || r.outcome == kCorrupt || r.outcome == kDrift;
}

struct VerifyProgress {
  size_t rounds_done = 0, rounds_total = 0;
  int64_t tokens_computed = 0;  // through the reference's forward pass so far
  double elapsed_s = 0;
};

struct VerifyOptions {
  int threads = 1;
  std::string model_id;        // the id the server reported ("" : the model's name)
  int64_t server_context = 0;  // the server's context length (0: unknown), so the reference stops where it had to
  bool from_scratch = false;   // replay every round from token 0 (quadratic; to check the incremental path)
  bool exact = true;           // JudgeNumerics(...).exact: false judges differing tokens as drift or corruption
  double near_tie_nats = 0.5;  // across identities: a served token this close to the reference's best is drift
  std::function<void(const VerifyProgress&)> on_progress;  // after each judged round
};

// Judges every round whose outcome is unverified, ok or corrupt (timeouts and
// errors stay what they are). Rounds are grouped into sessions by (point,
// session) to rebuild each request's messages, and each session's rounds are
// judged in order on one ReferenceSession (unless from_scratch). Sets each
// judged round's verify_s.
Status VerifyRounds(const Model& model, const AttentionOptions& attention, std::vector<RoundRecord>* rounds,
                    const VerifyOptions& options = {});

// A progress line for a terminal ("\r"-rewritten) or a log (one line every
// `log_every_s`): rounds verified of total, tokens/s, time left.
std::function<void(const VerifyProgress&)> VerifyProgressPrinter(bool tty, double log_every_s = 30);

}  // namespace tandem
