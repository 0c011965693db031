#include "runtime/grammar_budget.h"

#include <vector>

namespace tandem {

int64_t GrammarBudget::MaxOvershoot() {
  return Grammar::MaxAdvanceWork() + Grammar::MaxStateSize();
}

int64_t GrammarBudget::Run(std::span<Ask> asks) {
  if (asks.empty()) return 0;
  std::vector<size_t> order(asks.size()), walking;
  const size_t first = size_t(turn_++ % asks.size());
  for (size_t j = 0; j < asks.size(); ++j) order[j] = (first + j) % asks.size();
  // A share never exceeds what is left, and a walk stops once its share is
  // spent, so what is left never falls below minus one walk step; once it
  // is gone the others only look their masks up (cached: no work).
  int64_t left = per_step_, spent = 0;
  for (int round = 0; round < 2 && !order.empty(); ++round) {
    walking.clear();
    for (size_t j = 0; j < order.size(); ++j) {
      Ask& a = asks[order[j]];
      const int64_t share = left > 0 ? left / int64_t(order.size() - j) : 0;
      int64_t work = 0;
      a.mask = a.constraint->Allowed(a.answer_budget, share, &work);
      left -= work;
      spent += work;
      if (a.mask == nullptr && a.constraint->status().ok()) walking.push_back(order[j]);
    }
    if (left <= 0) break;
    order.swap(walking);
  }
  return spent;
}

}  // namespace tandem
