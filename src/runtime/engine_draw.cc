// Each step's draws: the token masks of constrained sequences, made under the
// step's grammar budget (structured/grammar_budget.h), then every token drawn.
// A sequence whose mask is not finished keeps its logits and draws in a later
// step, from the same logits and the same mask: the same token.
#include <algorithm>

#include "common/env.h"
#include "runtime/engine.h"
#include "runtime/ngram_drafter.h"

namespace tandem {

void Engine::DrawTokens(std::vector<Draw>& draws, std::chrono::steady_clock::time_point grammar_until) {
  std::vector<GrammarBudget::Ask> asks;
  std::vector<int64_t> ask_of(draws.size(), -1);
  for (size_t i = 0; i < draws.size(); ++i) {
    Sequence& s = *draws[i].seq;
    if (s.spec.sampling.constraint.empty()) continue;
    if (Status st = StartConstraint(s); !st.ok()) {
      Fail(s, st);
      continue;
    }
    // The answer's own budget only (the server clamps max_tokens to the
    // context), so the prefill engine draws the first token from the mask the
    // colocated engine would.
    ask_of[i] = int64_t(asks.size());
    asks.push_back({s.constraint.get(), int64_t(s.spec.sampling.answer_budget) - s.generated});
  }
  const int64_t work = grammar_budget_.Run(asks, grammar_until);
  counters_.grammar_work += work;
  counters_.grammar_work_max_step = std::max(counters_.grammar_work_max_step, work);
  metrics_.grammar_work.Increment(double(work));
  for (size_t i = 0; i < draws.size(); ++i) {
    Sequence& s = *draws[i].seq;
    if (s.done) continue;
    if (s.drafted > 0) {
      DrawDrafted(s, draws[i]);
      continue;
    }
    const std::span<const float> row = draws[i].row;
    const TokenMask* allowed = nullptr;
    if (ask_of[i] >= 0) {
      allowed = asks[size_t(ask_of[i])].mask;
      if (!s.constraint->status().ok()) {
        Fail(s, s.constraint->status());
        continue;
      }
      if (allowed == nullptr) {  // its walk goes on next step; the logits wait with it
        if (s.mask_row.empty()) s.mask_row.assign(row.begin(), row.end());
        ++counters_.grammar_mask_waits;
        metrics_.grammar_mask_waits.Increment();
        continue;
      }
      if (std::all_of(allowed->begin(), allowed->end(), [](uint64_t w) { return w == 0; })) {
        const int64_t budget = int64_t(s.spec.sampling.answer_budget) - s.generated;
        Fail(s, InvalidArgument("the response format cannot be completed in the " +
                                std::to_string(budget) + " tokens left (it needs " +
                                std::to_string(s.constraint->min_tokens()) + ")"));
        continue;
      }
    }
    const int64_t pos = int64_t(s.tokens.size());
    const int32_t token =
        sampler_.Sample(row, s.spec.sampling, s.tokens, pos, s.prompt_len, allowed);
    const auto drawn = options_.env->Now();
    if (std::optional<FinishReason> taken = role_->TakeToken(s, token)) {
      metrics_.ttft.Observe(SecondsBetween(s.arrival, drawn));  // the first token, before the role sends it on
      Finish(s, *taken);
    } else if (s.spec.logprobs >= 0) {
      const PositionLogprobs lp = ComputeLogprobs(row, token, s.spec.logprobs);
      Emit(s, token, &lp);
    } else {
      Emit(s, token);
    }
    s.mask_row.clear();  // after the last use of row, which may be it
  }
}

// Tokens a sequence decodes without drafts after a draft of one was not kept.
constexpr int64_t kDraftPause = 16;

// A decoding sequence's drafts for this step: from its own context, only
// where each drafted position is drawn as decoding without drafts would draw
// it (no token mask to advance between them, no per-token logprobs), and
// never past its max_tokens or the context (the walk draws one more).
void Engine::Draft(Sequence& s, int64_t max_tokens, int64_t decoding) {
  if (s.drafted > 0 || s.done || !s.spec.sampling.constraint.empty() || s.spec.logprobs >= 0 || !s.mask_row.empty()) {
    return;
  }
  if (s.draft_size < 0) s.draft_size = options_.speculate_tokens;
  bool probe = false;  // after a pause: one token, to measure acceptance again
  if (s.draft_size == 0) {
    if (s.generated < s.drafts_resume_at) return;
    s.draft_size = 1;
    probe = true;
  }
  int64_t room = std::min<int64_t>({max_tokens, int64_t(s.draft_size), int64_t(s.spec.max_tokens) - s.generated - 1,
                                    context_tokens_ - int64_t(s.tokens.size()) - 1});
  if (room <= 0) return;
  // Drafts only where they pay, by the step's measured costs (runtime/step_budget.h):
  // k drafted positions add about k prompt tokens' time to a step every one of the
  // `decoding` sequences waits for, and give this sequence the drafts it keeps,
  // a^1 + ... + a^k expected at its acceptance so far a (a small model's step
  // is compute-bound: a position costs as much as the step, and nothing pays).
  const double step_s = scheduler_.step_budget().decode_step_seconds();
  const double position_s = scheduler_.step_budget().per_prompt_token_seconds();
  if (options_.speculate_by_cost && !probe && step_s > 0 && position_s > 0) {
    const double a = double(s.drafts_kept + 1) / double(s.drafts_offered + 2);
    double expected = 0, power = 1, best_gain = 0;
    int64_t best = 0;
    for (int64_t k = 1; k <= room; ++k) {
      power *= a;
      expected += power;
      const double gain = expected * step_s - double(decoding) * double(k) * position_s;
      if (gain > best_gain) best_gain = gain, best = k;
    }
    if (best == 0) {  // not worth a draft now: decode without, and look again later
      s.draft_size = 0;
      s.drafts_resume_at = s.generated + kDraftPause;
      return;
    }
    room = best;
  }
  const std::vector<int32_t> draft = options_.drafter ? options_.drafter(s.tokens, int32_t(room))
                                                      : DraftFromContext(s.tokens, int32_t(room));
  if (draft.empty() || int64_t(draft.size()) > room) return;
  const int32_t vocab = model_.config().vocab_size;
  if (std::any_of(draft.begin(), draft.end(), [&](int32_t t) { return t < 0 || t >= vocab; })) return;
  s.tokens.insert(s.tokens.end(), draft.begin(), draft.end());
  s.drafted = int32_t(draft.size());
}

// The draws of a drafted sequence, position by position, as decoding without
// drafts makes them (the same logits bits: invariant 5; the same (seed,
// position) draws and history): a drafted token is kept when the draw at its
// position equals it; the first that differs is replaced by the draw, and the
// rows computed for the drafts after it are given up (`computed` winds back;
// those positions are written again when they are computed).
void Engine::DrawDrafted(Sequence& s, const Draw& d) {
  const std::vector<int32_t> drafts(s.tokens.end() - s.drafted, s.tokens.end());
  s.DropDrafts();
  const int64_t first = int64_t(s.tokens.size());  // the first drafted position
  const size_t vocab = size_t(model_.config().vocab_size);
  int64_t kept = 0;
  for (size_t i = 0; i <= drafts.size() && !s.done; ++i) {
    // The rows verified so far (its newest token's, the kept drafts'): what a
    // Finish in this draw's Emit hands to the prefix index.
    s.computed = first + kept;
    const std::span<const float> row = i == 0 ? d.row : d.drafted_rows.subspan((i - 1) * vocab, vocab);
    const int32_t token = sampler_.Sample(row, s.spec.sampling, s.tokens, int64_t(s.tokens.size()), s.prompt_len);
    if (std::optional<FinishReason> taken = role_->TakeToken(s, token)) {
      metrics_.ttft.Observe(SecondsBetween(s.arrival, options_.env->Now()));
      Finish(s, *taken);
      break;
    }
    Emit(s, token);
    if (i == drafts.size() || token != drafts[i]) break;
    ++kept;
  }
  s.computed = std::min<int64_t>(first + kept, int64_t(s.tokens.size()));
  s.drafts_offered += int64_t(drafts.size());
  s.drafts_kept += kept;
  counters_.drafted_tokens += int64_t(drafts.size());
  metrics_.drafted_tokens.Increment(double(drafts.size()));
  counters_.accepted_tokens += kept;
  metrics_.accepted_tokens.Increment(double(kept));
  // The next draft's size follows this one's acceptance.
  const int64_t most = options_.speculate_tokens;
  if (kept == int64_t(drafts.size())) {
    s.draft_size = int32_t(std::min<int64_t>(most, 2 * int64_t(s.draft_size)));
  } else if (kept == 0 && s.draft_size == 1) {
    s.draft_size = 0;  // pause: decoding without drafts for kDraftPause tokens
    s.drafts_resume_at = s.generated + kDraftPause;
  } else {
    s.draft_size = int32_t(std::max<int64_t>(1, kept == 0 ? s.draft_size / 2 : kept + 1));
  }
}

}  // namespace tandem
