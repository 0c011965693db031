// The decode role of the engine: requests whose prompts a prefill engine
// computes come back as committed handoffs (runtime/remote_prompts.h).
#include <algorithm>

#include "common/log.h"
#include "runtime/engine.h"

namespace tandem {

using Clock = std::chrono::steady_clock;

// Committed handoffs become runnable sequences whose first token is already
// sampled; failed ones fail their request (never serving its tokens).
void Engine::PollRemote() {
  for (RemotePrompts::Outcome& o : remote_->Poll()) {
    auto it = std::find_if(scheduler_.running().begin(), scheduler_.running().end(),
                           [&](const auto& s) { return s->awaiting && s->handoff == o.id; });
    if (it == scheduler_.running().end()) {
      if (o.status.ok()) pool_->Release(o.ready.pages);  // its request is gone
      continue;
    }
    Sequence& s = **it;
    s.awaiting = false;
    if (!o.status.ok()) {
      if (o.retryable && s.placements < options_.max_placements && remote_->healthy() && !s.handle->cancelled()) {
        TLOG_WARN("tandem decode: handoff %llu failed (%s): placing its request again\n",
                     (unsigned long long)o.id, o.status.message().c_str());
        s.replace = true;  // back to the queue; Admit begins a new handoff
        s.replaces = o.id;
        metrics_.handoff_replacements.Increment();
        continue;
      }
      Fail(s, o.status);
      continue;
    }
    s.pages = std::move(o.ready.pages);
    s.computed = int64_t(s.tokens.size());
    s.cached_prompt_tokens = std::min(o.ready.cached_tokens, s.prompt_len);
    metrics_.prefix_hit_tokens.Increment(double(s.cached_prompt_tokens));
    counters_.prefix_hit_tokens += s.cached_prompt_tokens;
    const double wait = SecondsBetween(s.handoff_sent, Clock::now());
    const double compute = double(o.ready.compute_us) * 1e-6, transfer = double(o.ready.transfer_us) * 1e-6;
    s.handoff_seconds += wait;
    s.committed_at = Clock::now();
    metrics_.handoff_wait.Observe(wait);
    metrics_.handoff_compute.Observe(compute);
    metrics_.handoff_transfer.Observe(transfer);
    metrics_.handoff_commit_wait.Observe(std::max(0.0, wait - compute - transfer));
    IndexPrompt(s);
    Emit(s, o.ready.first_token);
  }
  // Decode-role counters -> Prometheus (counters only move forward).
  const RemotePrompts::Counters r = remote_->counters();
  auto advance = [](prometheus::Counter& c, int64_t now, int64_t& seen) {
    if (now > seen) c.Increment(double(now - seen));
    seen = now;
  };
  advance(metrics_.handoffs_committed, r.committed, seen_.committed);
  advance(metrics_.handoffs_failed, r.failed, seen_.failed);
  advance(metrics_.handoffs_aborted, r.aborted, seen_.aborted);
  advance(metrics_.handoffs_verified, r.verified, seen_.verified);
  advance(metrics_.handoff_digest_mismatches, r.digest_mismatches, seen_.digest_mismatches);
  seen_.buffer_bytes.resize(r.buffer_bytes.size());
  for (size_t b = 0; b < r.buffer_bytes.size() && int32_t(b) < spec_.registry.size(); ++b) {
    if (r.buffer_bytes[b] > seen_.buffer_bytes[b]) {
      metrics_.HandoffBytes(spec_.registry.spec(int32_t(b)).name).Increment(double(r.buffer_bytes[b] - seen_.buffer_bytes[b]));
      seen_.buffer_bytes[b] = r.buffer_bytes[b];
    }
  }
  metrics_.handoff_quarantined_pages.Set(double(r.quarantined_pages));
  metrics_.handoffs_in_flight.Set(double(r.in_flight));
  link_healthy_ = remote_->healthy();
  metrics_.prefill_links_up.Set(double(r.links_up));
  advance(metrics_.prefill_link_reconnects, r.reconnects, seen_.reconnects);
  advance(metrics_.prefill_links_declared_dead, r.links_declared_dead, seen_.links_declared_dead);
  advance(metrics_.prefill_affinity_hits, r.affinity_hits, seen_.affinity_hits);
  // Re-placed requests go back to the head of the queue, in their order.
  for (auto it = scheduler_.running().rbegin(); it != scheduler_.running().rend(); ++it) {
    if ((*it)->replace) {
      (*it)->replace = false;
      scheduler_.waiting().push_front(std::move(*it));
    }
  }
  std::erase_if(scheduler_.running(), [](const auto& s) { return s == nullptr || s->done; });
}

}  // namespace tandem
