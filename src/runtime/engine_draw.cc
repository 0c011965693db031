// Each step's draws: the token masks of constrained sequences, made under the
// step's grammar budget (structured/grammar_budget.h), then every token drawn.
// A sequence whose mask is not finished keeps its logits and draws in a later
// step, from the same logits and the same mask: the same token.
#include <algorithm>

#include "common/env.h"
#include "runtime/engine.h"

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

}  // namespace tandem
