// One request inside the engine (runtime/engine.h, runtime/scheduler.h):
// its tokens, pages, progress and per-role state. Loop thread only.
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
#include "runtime/token_constraint.h"

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
  // made (runtime/grammar_budget.h): drawn from in a later step. Empty otherwise.
  std::vector<float> mask_row;
  std::chrono::steady_clock::time_point arrival, deadline, last_token;
  bool started = false;  // a token was streamed
  bool done = false;
  uint64_t handoff = 0;   // disaggregated: the handoff bringing this prompt's cache
  bool awaiting = false;  // disaggregated: waiting for that handoff's commit
  std::chrono::steady_clock::time_point handoff_sent, committed_at;
  double handoff_seconds = 0;
  int32_t placements = 0;                 // handoffs begun for this request
  std::chrono::steady_clock::time_point page_wait_since{};    // waiting for pages to begin a handoff, since
  bool replace = false;                   // its handoff failed for the link's sake: place it again
  uint64_t replaces = 0;                  // that failed handoff (another prefill engine is preferred)
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
};

}  // namespace tandem
