#include "runtime/logprobs.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace tandem {
namespace {

float Finite(float x) { return std::isnan(x) ? -INFINITY : x; }

}  // namespace

PositionLogprobs ComputeLogprobs(std::span<const float> logits, int32_t chosen, int top_n) {
  float max = -INFINITY;
  for (float l : logits) max = std::max(max, Finite(l));
  // log Z = max + log(sum exp(l - max)), summed in index order in double.
  double sum = 0;
  if (std::isfinite(max)) {
    for (float l : logits) sum += double(kernels::ExpDeterministic(Finite(l) - max));
  }
  const double log_z = std::isfinite(max) ? double(max) + std::log(sum) : 0.0;
  auto logprob = [&](int32_t id) {
    const float l = Finite(logits[size_t(id)]);
    return std::isfinite(max) ? float(double(l) - log_z) : -INFINITY;
  };
  PositionLogprobs out;
  out.chosen = {chosen, logprob(chosen)};
  const size_t n = std::min(size_t(std::max(0, top_n)), logits.size());
  if (n == 0) return out;
  // The n best ids: higher logit first, equal logits by lower id (a total order).
  std::vector<int32_t> ids;
  ids.reserve(n + 1);
  auto better = [&](int32_t a, int32_t b) {
    const float x = Finite(logits[size_t(a)]), y = Finite(logits[size_t(b)]);
    return x != y ? x > y : a < b;
  };
  for (int32_t id = 0; id < int32_t(logits.size()); ++id) {
    if (ids.size() == n && !better(id, ids.back())) continue;
    ids.insert(std::upper_bound(ids.begin(), ids.end(), id, better), id);
    if (ids.size() > n) ids.pop_back();
  }
  for (int32_t id : ids) out.top.push_back({id, logprob(id)});
  return out;
}

}  // namespace tandem
