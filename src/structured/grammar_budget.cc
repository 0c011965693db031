#include "structured/grammar_budget.h"
#include "common/env.h"

#include <algorithm>
#include <vector>

namespace tandem {

int64_t GrammarBudget::MaxOvershoot() {
  return Grammar::MaxAdvanceWork() + Grammar::MaxStateSize();
}

int64_t GrammarBudget::Run(std::span<Ask> asks, std::chrono::steady_clock::time_point until) {
  if (asks.empty()) return 0;
  std::vector<size_t> walking(asks.size()), still;
  const size_t first = size_t(turn_++ % asks.size());
  for (size_t j = 0; j < asks.size(); ++j) walking[j] = (first + j) % asks.size();
  // A slice never exceeds what is left, and a walk stops once its slice is
  // spent, so what is left never falls below minus one walk step. Once the
  // budget or the time is gone the rest only look their masks up (cached: no
  // work).
  int64_t left = per_step_, spent = 0;
  bool out_of_time = false;
  while (!walking.empty()) {
    still.clear();
    const int64_t spent_before = spent;
    for (size_t i : walking) {
      Ask& a = asks[i];
      const int64_t slice = (left > 0 && !out_of_time) ? std::min(left, kSlice) : 0;
      int64_t work = 0;
      a.mask = a.constraint->Allowed(a.answer_budget, slice, &work);
      left -= work;
      spent += work;
      if (work > 0 && until != std::chrono::steady_clock::time_point::max() &&
          Env::Default().Now() >= until) {
        out_of_time = true;
      }
      if (a.mask == nullptr && a.constraint->status().ok()) still.push_back(i);
    }
    if (left <= 0 || out_of_time || spent == spent_before) break;
    walking.swap(still);
  }
  return spent;
}

}  // namespace tandem
