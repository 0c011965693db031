// One request inside the engine (runtime/engine.h, runtime/scheduler.h):
// its tokens, pages and progress (a role keeps its own per-request state,
// runtime/engine_role.h). Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "cache/layer_gates.h"
#include "model/tokenizer.h"
#include "prefix/tiers.h"
#include "runtime/request.h"
#include "runtime/stop_strings.h"
#include "structured/token_constraint.h"

namespace tandem {

inline double SecondsBetween(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One request inside the engine. tokens = prompt + generated; the cache holds
// tokens [0, computed); a step computes [computed, tokens.size()) (a prefill
// chunk, or the one newest token) and, once computed == tokens.size(),
// samples the next token at position tokens.size().
struct Sequence {
  std::shared_ptr<RequestHandle> handle;
  RequestSpec spec;
  uint64_t cache_root = kChainRootSeed;  // CacheRoot(spec.cache_salt), set at Submit
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  int64_t computed = 0;
  int64_t generated = 0;
  int64_t cached_prompt_tokens = 0;
  std::vector<int32_t> pages;
  std::unique_ptr<StreamDecoder> decoder;
  std::unique_ptr<StopStringMatcher> stops;
  std::unique_ptr<TokenConstraint> constraint;  // spec.sampling.constraint, from the first token sampled or received
  // The logits of the next position while its token mask is still being
  // made (structured/grammar_budget.h): drawn from in a later step. Empty otherwise.
  std::vector<float> mask_row;
  std::chrono::steady_clock::time_point arrival, deadline, last_token;
  bool started = false;  // a token was streamed
  bool done = false;
  int32_t admissions = 0;      // times admitted (to run, or held by the role)
  uint64_t admission_order = 0;  // when it was last admitted (the scheduler's count): running_ is in this order
  // Cache tiers: a load of this prompt's prefix from the host tier still
  // landing (each forward read waits on its layer's gate), and an L3 prefetch.
  std::shared_ptr<LayerGates> gates;
  std::shared_ptr<TieredCache::Prefetch> prefetch;
  bool prefetched = false;       // the L3 prefetch was tried (never twice)
  int64_t l2_pages_before_prefetch = 0;
  // spec.prompt_logprobs: entry k is prompt token k + 1's (filled as the
  // prompt's chunks are computed; a preempted sequence does not add twice).
  std::vector<PositionLogprobs> prompt_logprobs;
  bool prompt_logprobs_sent = false;
  // A resumed answer: how many of spec.resumed were replayed so far
  // (Engine::ReplaySome), and the text they made, sent as one replay event
  // once all are.
  size_t replayed = 0;
  std::string replay_text;
  // Speculation (EngineOptions::speculate_tokens): drafted tokens appended to
  // `tokens` for the step that verifies them (Scheduler::Schedule appends
  // them, Engine::DrawTokens walks and removes them), 0 outside it; and how
  // many this sequence drafts next (adapted to its acceptance; -1: not yet;
  // 0: paused after drafts of one were not kept).
  int32_t drafted = 0;
  int32_t draft_size = -1;
  int64_t drafts_resume_at = 0;  // draft_size 0 (paused): drafting again from this many generated
  int64_t drafts_offered = 0, drafts_kept = 0;  // its acceptance so far
  // Takes the drafted tokens back off `tokens` (a preempted sequence, or one
  // whose draws have walked them).
  void DropDrafts() {
    tokens.resize(tokens.size() - size_t(drafted));
    drafted = 0;
  }
};

}  // namespace tandem
