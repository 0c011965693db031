#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "common/splitmix.h"
#include "kernels/ops.h"

namespace tandem {
namespace {

}  // namespace

float CounterUniform(uint64_t seed, int64_t position) {
  const uint64_t h = SplitMix64(seed ^ SplitMix64(uint64_t(position)));
  return float(h >> 40) * (1.0f / 16777216.0f);
}

// The logits after the penalties and biases: repetition (over the last
// repeat_last_n tokens), then frequency and presence (over the generated
// tokens), then logit_bias. The logits themselves when none applies.
std::span<const float> Sampler::Adjust(std::span<const float> logits, const SamplingParams& p,
                                       std::span<const int32_t> history, int64_t prompt_len) {
  const bool repetition = p.repetition_penalty != 1.0f && p.repeat_last_n > 0 && !history.empty();
  const size_t first_generated = prompt_len < 0 ? history.size() : std::min(history.size(), size_t(prompt_len));
  const auto generated = history.subspan(first_generated);
  const bool frequency = (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) && !generated.empty();
  if (!repetition && !frequency && p.logit_bias.empty()) return logits;
  penalized_.assign(logits.begin(), logits.end());
  if (repetition) {
    const size_t n = std::min(history.size(), size_t(p.repeat_last_n));
    for (int32_t id : history.subspan(history.size() - n)) {
      if (id < 0 || size_t(id) >= penalized_.size()) continue;
      float& l = penalized_[size_t(id)];
      const float orig = logits[size_t(id)];  // penalize each distinct token once
      if (l != orig) continue;
      l = orig > 0 ? orig / p.repetition_penalty : orig * p.repetition_penalty;
    }
  }
  if (frequency) {
    counts_.resize(logits.size(), 0);
    for (int32_t id : generated) {
      if (id >= 0 && size_t(id) < counts_.size()) ++counts_[size_t(id)];
    }
    for (int32_t id : generated) {  // each distinct id once: its count is zeroed after
      if (id < 0 || size_t(id) >= counts_.size() || counts_[size_t(id)] == 0) continue;
      penalized_[size_t(id)] -= p.frequency_penalty * float(counts_[size_t(id)]) + p.presence_penalty;
      counts_[size_t(id)] = 0;
    }
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id >= 0 && size_t(id) < penalized_.size()) penalized_[size_t(id)] += bias;
  }
  return penalized_;
}

int32_t Sampler::Sample(std::span<const float> logits, const SamplingParams& p,
                        std::span<const int32_t> history, int64_t position, int64_t prompt_len,
                        const std::vector<uint64_t>* allowed) {
  const std::span<const float> row = Adjust(logits, p, history, prompt_len);
  auto ok = [allowed](size_t i) { return allowed == nullptr || ((*allowed)[i >> 6] >> (i & 63)) & 1; };
  // Highest logit first; equal logits by lower id, so the order is total. A
  // NaN logit (broken weights, a poisoned cache page) ranks as -inf (and
  // counts as -inf in the softmax below): sorting with NaN compared as is
  // would not be a strict weak order.
  auto better = [](const Candidate& a, const Candidate& b) {
    const float x = std::isnan(a.logit) ? -INFINITY : a.logit, y = std::isnan(b.logit) ? -INFINITY : b.logit;
    return x != y ? x > y : a.id < b.id;
  };
  if (p.temperature <= 0.0f) {
    Candidate best{0, -1};
    for (size_t i = 0; i < row.size(); ++i) {
      Candidate c{row[i], int32_t(i)};
      if (ok(i) && (best.id < 0 || better(c, best))) best = c;
    }
    return std::max(best.id, 0);
  }
  candidates_.clear();
  for (size_t i = 0; i < row.size(); ++i) {
    if (ok(i)) candidates_.push_back({std::isnan(row[i]) ? -INFINITY : row[i], int32_t(i)});
  }
  if (candidates_.empty()) return 0;
  size_t n = candidates_.size();
  if (p.top_k > 0 && size_t(p.top_k) < n) {
    n = size_t(p.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + n, candidates_.end(), better);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), better);
  }
  // Softmax over the survivors, in sorted order; probabilities reuse .logit.
  const float max_logit = candidates_[0].logit;
  if (max_logit == -INFINITY) return candidates_[0].id;  // nothing has weight: the order decides
  float total = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    candidates_[i].logit = kernels::ExpDeterministic((candidates_[i].logit - max_logit) / p.temperature);
    total = total + candidates_[i].logit;
  }
  if (p.top_p < 1.0f) {
    float cum = 0.0f;
    for (size_t i = 0; i < n; ++i) {
      cum = cum + candidates_[i].logit;
      if (cum >= p.top_p * total) {
        n = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const float floor = p.min_p * candidates_[0].logit;
    size_t keep = 1;
    while (keep < n && candidates_[keep].logit >= floor) ++keep;
    n = keep;
  }
  float kept = 0.0f;
  for (size_t i = 0; i < n; ++i) kept = kept + candidates_[i].logit;
  const float target = CounterUniform(p.seed, position) * kept;
  float cum = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    cum = cum + candidates_[i].logit;
    if (target < cum) return candidates_[i].id;
  }
  return candidates_[n - 1].id;
}

}  // namespace tandem
