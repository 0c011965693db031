// What an engine is configured with, and the counts it publishes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "cache/page_pool.h"
#include "common/env.h"
#include "common/status.h"
#include "model/cache_spec.h"
#include "prefix/prefix_index.h"
#include "prefix/tiers.h"

namespace tandem {

// The order in which a step gives prompt chunks their share of the token
// budget (decode tokens always go first). Outputs never depend on it.
enum class PrefillOrder {
  kArrival,         // admission order: bounds the tail (the last prompt of a burst waits for the burst, not more)
  kShortestFirst,   // the oldest prompt first (it always progresses), then shortest remaining: short appends
                    // do not wait behind long prompts (lower median time to first token, longer tail)
};
StatusOr<PrefillOrder> ParsePrefillOrder(const std::string& name);  // "arrival" | "shortest"

struct EngineOptions {
  // The time deadlines, drains, stall checks and metrics are kept by (tests give a fake one).
  const Env* env = &Env::Default();
  AttentionOptions attention;
  int64_t cache_tokens = 65536;   // page pool size, in tokens
  int64_t context_tokens = 0;     // per sequence; 0 = the model's context length
  int32_t max_running = 32;       // sequences in the decode batch
  int32_t max_waiting = 256;      // queued requests before Submit refuses
  int32_t chunk_size = 8192;      // prefill tokens of one sequence per step
  // A resumed answer's delivered tokens go through the text decoder, the stop
  // strings and the grammar before it runs (RequestSpec::resumed): at most
  // this many, all resumed requests together, in one pass of the engine
  // loop, so sixteen choices resuming a whole context each take their turns
  // beside everyone's steps (about a microsecond a token here, a few ms a
  // pass) instead of holding the loop. A token whose grammar walk is long
  // counts for one more per 1,024 units of grammar work.
  int64_t replay_tokens_per_pass = 4096;
  int32_t max_batch_tokens = 8192;
  // Beside decoding sequences, a step's prompt chunks are sized so the step
  // takes about this long (runtime/step_budget.h): what a burst of prompts
  // may add to inter-token latency. 0: only the token budgets bound a step.
  std::chrono::milliseconds step_time{200};
  // The engine loop's watchdog (invariant 10): while one pass of the loop
  // (a step, with what it takes in) has run longer than this, the engine is
  // unhealthy and says why, so a router stops placing requests here. 0: off.
  std::chrono::milliseconds loop_watchdog{15'000};
  PrefillOrder prefill_order = PrefillOrder::kArrival;  // every role's default
  bool prefix_cache = true;
  std::chrono::milliseconds request_timeout{600'000};
  int threads = 2;
  // Structured outputs: the grammar work (Grammar::Advance's units, about a
  // nanosecond each) the token masks of one step may take together; a mask
  // that needs more is finished in later steps (structured/grammar_budget.h).
  int64_t grammar_work_per_step = int64_t(1) << 22;
  // And, when sequences computed in the step, at most this fraction of
  // the step's model time: what one request's masks may add to everyone's
  // inter-token latency.
  double grammar_time_share = 0.1;
  // Speculative decoding (runtime/ngram_drafter.h): each decoding sequence
  // drafts up to this many tokens from its own context, verified in one pass
  // with its newest token; a drafted token is kept exactly when the draw at
  // its position equals it, so answers are the same bits as without (0: off).
  int32_t speculate_tokens = 0;
  // Only while at most this many sequences decode in a step: a larger batch
  // is compute-bound, where verifying drafts costs more than it saves.
  int32_t speculate_max_batch = 8;
  // Draft only where the step's measured costs say drafts pay (Engine::Draft);
  // false: whenever a draft is found (a benchmark's acceptance curve).
  bool speculate_by_cost = true;
  // Where drafts come from: given a sequence's tokens, up to max_tokens that
  // may follow. None: its own context (DraftFromContext). Any proposer is
  // safe: a draft is kept only where it equals the draw.
  std::function<std::vector<int32_t>(std::span<const int32_t> tokens, int32_t max_tokens)> drafter;
  // Host (L2) and disk (L3) tiers under the prefix cache; off when host_pages is 0.
  TierOptions tiers;
  // What the prefix cache holds, as it changes (PrefixIndex::SetEventHook),
  // on the loop thread: a KV events publisher (discovery/kv_events.h). None:
  // nothing is published.
  PrefixIndex::EventHook prefix_events;
  // Called with every page freed or reserved, L1 and L2 (PagePool::SetPageHook);
  // none in production. The fault library's page poisoning comes this way.
  PagePool::PageHook page_hook;
};

struct EngineStats {
  int64_t running = 0, waiting = 0;
  PagePool::Accounting pages;
  int64_t cached_pages = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0, prefix_hit_tokens = 0;
  int64_t preemptions = 0, requests_finished = 0, requests_cancelled = 0, requests_failed = 0;
  // Structured outputs: grammar work on token masks, in all and in the
  // busiest step, and draws that waited a step for their mask.
  int64_t grammar_work = 0, grammar_work_max_step = 0, grammar_mask_waits = 0;
  // Resumed tokens replayed; the most one pass of the loop replayed, in
  // tokens (a token whose grammar walk is long counts for more: Engine::
  // ReplaySome); steps that ran while a replay was still under way.
  int64_t replay_tokens = 0, replay_max_pass = 0, steps_beside_replay = 0;
  // Speculation: tokens drafted, and those of them the draws kept.
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  bool healthy = false;
};

}  // namespace tandem
