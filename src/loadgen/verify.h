// The exact corruption oracle: every answered round of an agentic transcript
// is replayed on the reference engine — one sequence, no prefix cache, no
// handoff — and must match what the server sent bit for bit.
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
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/thread_pool.h"
#include "loadgen/agentic.h"
#include "model/cache_spec.h"
#include "model/model.h"
#include "server/openai_api.h"

namespace tandem {

class ReferenceVerifier {
 public:
  // ctx_tokens: the largest prompt + output to replay.
  ReferenceVerifier(const Model& model, const CacheSpec& spec, ThreadPool& threads, int64_t ctx_tokens,
                    const std::string& model_id);

  // Judges one answered round given the messages its request carried. Sets
  // outcome (ok / corrupt), first_mismatch and verify_note; a round the
  // reference cannot replay (its request no longer parses, it does not fit,
  // the reference fails) becomes an error, never corrupt.
  void Judge(const nlohmann::json& messages, RoundRecord* round);

 private:
  enum class Verdict { kSame, kDiffers, kNotReplayed };
  Verdict JudgeTokens(const ParsedRequest& req, RoundRecord* round);
  Verdict JudgeText(const ParsedRequest& req, RoundRecord* round);
  // The served ids must spell the served text (a decoder that loses bytes
  // after a handoff corrupts the text, not the ids).
  Verdict CheckTextMatchesIds(const ParsedRequest& req, RoundRecord* round);

  const Model& model_;
  CacheSpec spec_;
  ThreadPool& threads_;
  int64_t ctx_tokens_;
  ModelInfo info_;
};

// The attention options a transcript's server reported (header
// server_attention), or `fallback` when it reported none.
StatusOr<AttentionOptions> AttentionFromHeader(const nlohmann::json& server_attention,
                                               const AttentionOptions& fallback);

// Judges every round whose outcome is unverified, ok or corrupt (timeouts and
// errors stay what they are). Rounds are grouped into sessions by (point,
// session) to rebuild each request's messages. on_round is called after each.
// server_context: the server's context length (0: unknown), so the reference
// stops where the server had to.
Status VerifyRounds(const Model& model, const AttentionOptions& attention, int threads, const std::string& model_id,
                    std::vector<RoundRecord>* rounds, const std::function<void(size_t done, size_t total)>& on_round = {},
                    int64_t server_context = 0);

}  // namespace tandem
