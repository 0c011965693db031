// One engine step's budget for structured-output work.
//
// A constrained request's token mask is a walk of the vocab trie
// (structured/token_constraint.h) that takes from nothing (its state's mask is
// cached) to a fraction of a second (many long parses alive in a new state).
// Masks are made on the engine's loop thread, so without a bound one
// request's schema (n=16 choices, each in a new state every token) adds its
// work to every other request's inter-token latency. A step now spends on
// masks at most
//   - `per_step` units of grammar work (Grammar::Advance's count, about a
//     nanosecond each), plus the one advance that crosses it, and
//   - when sequences computed in the step, a share of the step's model time
//     (EngineOptions::grammar_time_share): the step's grammar work may add
//     that fraction to everyone's inter-token latency and no more,
// handed out round robin in slices of kSlice units among the sequences that
// need a mask (the one that goes first rotates, so every walk progresses).
//
// A mask that is not finished is finished in later steps, with the same
// bits (its walk resumes where it stopped), and its sequence draws its token
// then: the budget decides only *when* a token comes, never *which*
// (invariant 5). What ends a request is its own mask passing its bound
// (TokenConstraint::MaxWorkPerToken), a function of its grammar state alone.
//
// Loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "structured/token_constraint.h"

namespace tandem {

class GrammarBudget {
 public:
  explicit GrammarBudget(int64_t per_step) : per_step_(per_step) {}

  struct Ask {
    TokenConstraint* constraint = nullptr;
    int64_t answer_budget = 0;        // tokens left for the answer, this one included
    const TokenMask* mask = nullptr;  // out: the mask (valid until the constraint's next
                                      // Allowed or Accept), or null: not finished, or the
                                      // request failed (constraint->status())
  };
  // Spends this step's budget on the asks, stopping at `until` (a slice
  // begun before it is finished); returns the work done, at most per_step +
  // MaxOvershoot().
  int64_t Run(std::span<Ask> asks,
              std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max());

  // The most one ask walks at a time before the next one's turn (and the clock is read).
  static constexpr int64_t kSlice = int64_t(1) << 15;

  // The most one walk step can add past its share: one advance and reading
  // the state it reached.
  static int64_t MaxOvershoot();

 private:
  const int64_t per_step_;
  uint64_t turn_ = 0;  // rotates who goes first, so every walk progresses
};

}  // namespace tandem
