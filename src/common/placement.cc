#include "common/placement.h"

#include <algorithm>

namespace tandem {

int PickTarget(std::span<const int64_t> load, const std::vector<bool>& usable, int preferred, size_t* rr) {
  int64_t least = INT64_MAX;
  for (size_t i = 0; i < load.size(); ++i) {
    if (usable[i]) least = std::min(least, load[i]);
  }
  if (least == INT64_MAX) return -1;
  // The cached prefix is worth a moderately longer queue: up to twice the
  // least load plus two requests.
  if (preferred >= 0 && size_t(preferred) < load.size() && usable[size_t(preferred)] &&
      load[size_t(preferred)] <= 2 * least + 2) {
    return preferred;
  }
  const size_t n = load.size();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (*rr + k) % n;
    if (usable[i] && load[i] == least) {
      *rr = i + 1;
      return int(i);
    }
  }
  return -1;
}

void AffinityMap::Record(uint64_t key, int target) {
  auto [it, inserted] = map_.insert_or_assign(key, target);
  if (!inserted) return;
  order_.push_back(key);
  while (map_.size() > capacity_ && !order_.empty()) {
    map_.erase(order_.front());
    order_.pop_front();
  }
}

void AffinityMap::ForgetTarget(int target) {
  std::erase_if(map_, [&](const auto& kv) { return kv.second == target; });
  std::erase_if(order_, [&](uint64_t k) { return map_.count(k) == 0; });
}

}  // namespace tandem
