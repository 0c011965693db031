// What a request hears from the engine: its tokens and their log-probabilities
// as they are sampled, then its end (finished, handed off, failed), after which
// its pages go to the prefix cache or back to the pool.
#include <algorithm>

#include "common/env.h"
#include "runtime/engine.h"
#include "runtime/stop_strings.h"

namespace tandem {

using Clock = std::chrono::steady_clock;

// Rows [0, n) are the logits at positions start .. start + n - 1: row i
// predicts prompt token start + i + 1. The first prompt token has no logprob.
void Engine::CollectPromptLogprobs(Sequence& s, int64_t start, size_t n,
                                   const std::function<std::span<const float>(size_t)>& row_at) {
  if (s.prompt_logprobs_sent) return;
  if (s.prompt_logprobs.empty() && start == 0) {
    PositionLogprobs first;
    first.chosen.token = s.tokens[0];
    first.has_logprob = false;
    s.prompt_logprobs.push_back(first);
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t next = start + int64_t(i) + 1;  // the prompt token row i predicts
    if (next >= s.prompt_len || int64_t(s.prompt_logprobs.size()) != next) continue;  // past the prompt, or done before a preemption
    s.prompt_logprobs.push_back(ComputeLogprobs(row_at(i), s.tokens[size_t(next)], s.spec.logprobs));
  }
}

void Engine::Emit(Sequence& s, int32_t token, const PositionLogprobs* logprobs) {
  const auto now = options_.env->Now();
  if (!s.spec.ignore_eos && model_.tokenizer().IsEndOfGeneration(token)) return Finish(s, FinishReason::kStop);
  if (Status st = StartConstraint(s); !st.ok()) return Fail(s, st);
  s.tokens.push_back(token);
  if (s.constraint) s.constraint->Accept(token);
  ++s.generated;
  ++counters_.generated_tokens;
  metrics_.generated_tokens.Increment();
  if (!s.started) {
    metrics_.ttft.Observe(SecondsBetween(s.arrival, now));
    s.started = true;
  } else {
    metrics_.inter_token.Observe(SecondsBetween(s.last_token, now));
  }
  s.last_token = now;
  StreamEvent ev;
  ev.text = s.stops->Push(s.decoder->Push(token));
  ev.tokens = {token};
  if (logprobs) ev.logprobs = {*logprobs};
  s.handle->Push(std::move(ev));
  if (s.stops->stopped()) return Finish(s, FinishReason::kStop);
  if (s.constraint && s.constraint->finished()) return Finish(s, FinishReason::kStop);  // the answer is complete
  if (s.generated >= s.spec.max_tokens || int64_t(s.tokens.size()) >= context_tokens_) {
    Finish(s, FinishReason::kLength);
  }
}

// A constrained request's grammar state, from its start (compiled once per
// constraint text and kept for the next requests that send it). A resumed
// answer's was made by its replay (ReplaySome), walked over its tokens.
Status Engine::StartConstraint(Sequence& s) {
  if (s.constraint || s.spec.sampling.constraint.empty()) return Status::Ok();
  TANDEM_ASSIGN_OR_RETURN(s.constraint, constraints_.Start(s.spec.sampling.constraint));
  return s.constraint->status();
}

// Resumed requests: their delivered tokens go through the text decoder, the
// stop strings and the grammar, as they did where the answer began, at most
// replay_tokens_per_pass of them a pass (a token whose grammar walk is long
// counts for more), oldest request first (a prompt's chunks take their turns
// the same way); each comes back as one replay event.
void Engine::ReplaySome() {
  constexpr int64_t kReplayGrammarWork = 1024;
  int64_t budget = std::max<int64_t>(1, options_.replay_tokens_per_pass);
  int64_t spent = 0, tokens = 0;
  while (!replaying_.empty() && spent < budget) {
    Sequence& s = *replaying_.front();
    if (!s.done) {
      if (s.replayed == 0 && !s.spec.sampling.constraint.empty() && !s.constraint) {
        auto started = constraints_.Start(s.spec.sampling.constraint);
        if (!started.ok()) {
          Fail(s, started.status());
        } else {
          s.constraint = std::move(started).value();
        }
      }
      // A token costs one, and its grammar walk one more per kReplayGrammarWork
      // units (about a microsecond, what the rest of a token's replay takes).
      for (; !s.done && s.replayed < s.spec.resumed.size() && spent < budget; ++s.replayed, ++tokens) {
        const int32_t t = s.spec.resumed[s.replayed];
        s.replay_text += s.stops->Push(s.decoder->Push(t));
        int64_t work = 0;
        if (s.constraint) s.constraint->Accept(t, &work);
        spent += 1 + work / kReplayGrammarWork;
      }
      if (!s.done && s.replayed < s.spec.resumed.size()) break;  // its turn is over
      if (!s.done) EndReplay(s);
    }
    if (!s.done) scheduler_.Enqueue(std::move(replaying_.front()));
    replaying_.pop_front();
  }
  counters_.replay_tokens += tokens;
  counters_.replay_max_pass = std::max(counters_.replay_max_pass, spent);
}

// A resumed request's tokens are all replayed: their text goes out as one
// replay event; an answer they already end ends here.
void Engine::EndReplay(Sequence& s) {
  StreamEvent ev;
  ev.replay = true;
  ev.tokens = s.spec.resumed;
  ev.text = std::move(s.replay_text);
  s.replay_text.clear();
  s.handle->Push(std::move(ev));
  if (s.constraint && !s.constraint->status().ok()) return Fail(s, s.constraint->status());
  if (s.stops->stopped() || (s.constraint && s.constraint->finished())) return Finish(s, FinishReason::kStop);
  if (s.generated >= s.spec.max_tokens || int64_t(s.tokens.size()) >= context_tokens_) {
    Finish(s, FinishReason::kLength);
  }
}

// A prompt's cache the role brought (RoleHost::Resume): the request runs on
// from its first token, sampled where the prompt was computed.
void Engine::Resume(Sequence& s, std::vector<int32_t> pages, int32_t first_token, int64_t cached_tokens) {
  scheduler_.Resume(s);
  s.pages = std::move(pages);
  s.computed = int64_t(s.tokens.size());
  s.cached_prompt_tokens = std::min(cached_tokens, s.prompt_len);
  metrics_.prefix_hit_tokens.Increment(double(s.cached_prompt_tokens));
  counters_.prefix_hit_tokens += s.cached_prompt_tokens;
  IndexPrompt(s);
  Emit(s, first_token);
}

void Engine::Finish(Sequence& s, FinishReason reason) {
  if (s.done) return;
  if (reason != FinishReason::kCancelled && !s.stops->stopped()) {
    StreamEvent tail;
    tail.text = s.stops->Push(s.decoder->Flush()) + s.stops->Flush();
    if (!tail.text.empty()) s.handle->Push(std::move(tail));
  }
  StreamEvent ev;
  ev.kind = StreamEvent::Kind::kFinish;
  ev.finish = reason;
  ev.prompt_tokens = s.prompt_len;
  ev.completion_tokens = s.generated;
  ev.cached_prompt_tokens = s.cached_prompt_tokens;
  s.handle->Push(std::move(ev));
  Retire(s);
  s.done = true;
  metrics_.e2e.Observe(SecondsBetween(s.arrival, options_.env->Now()));
  if (reason == FinishReason::kCancelled) {
    ++counters_.requests_cancelled;
    metrics_.cancelled.Increment();
  } else {
    ++counters_.requests_finished;
    metrics_.finished.Increment();
  }
  role_->OnEnd(s, reason, Status::Ok());
}

void Engine::Fail(Sequence& s, Status error) {
  if (s.done) return;
  StreamEvent ev;
  ev.kind = StreamEvent::Kind::kError;
  ev.error = error;
  s.handle->Push(std::move(ev));
  Retire(s);
  s.done = true;
  ++counters_.requests_failed;
  metrics_.failed.Increment();
  role_->OnEnd(s, FinishReason::kError, error);
}

// Gives the sequence's computed full pages to the prefix index and drops its
// own page references.
void Engine::Retire(Sequence& s) {
  if (s.gates) {
    s.gates->WaitAll();  // nothing may still be landing in pages we hand on or free
    s.gates.reset();
  }
  role_->BeforeRelease(s);
  if (index_ && !s.pages.empty()) {
    // Only verified rows: never past the sequence's real tokens (drafts are not its tokens).
    const size_t verified = size_t(std::min<int64_t>(s.computed, int64_t(s.tokens.size()) - s.drafted));
    const auto computed = std::span<const int32_t>(s.tokens).first(verified);
    index_->Insert(computed, s.pages, /*with_partial=*/true, s.cache_root);
    if (tiers_) tiers_->OnL1Insert(computed, s.pages, s.cache_root);
  }
  pool_->Release(s.pages);
  s.pages.clear();
}

}  // namespace tandem
