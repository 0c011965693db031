// Cache-aware placement with load as the tie-breaker, shared by the router
// (which decode server) and the decode role (which prefill engine): a
// request goes where its prefix is cached (`preferred`), unless that target
// is down or carries clearly more than the least loaded one; otherwise to the
// least loaded, round-robin among equals.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

namespace tandem {

// Index into load/usable, or -1 when no target is usable. `preferred` < 0:
// none. *rr rotates among equally loaded targets.
int PickTarget(std::span<const int64_t> load, const std::vector<bool>& usable, int preferred, size_t* rr);

// A bounded memory of which target served which key (a conversation's
// prefix): the oldest entries are forgotten first.
class AffinityMap {
 public:
  explicit AffinityMap(size_t capacity = size_t(1) << 20) : capacity_(capacity) {}
  // The target last recorded for key, or -1.
  int Find(uint64_t key) const {
    auto it = map_.find(key);
    return it == map_.end() ? -1 : it->second;
  }
  void Record(uint64_t key, int target);
  // Forgets every key of one target (its cache is gone: a restart).
  void ForgetTarget(int target);
  size_t size() const { return map_.size(); }

 private:
  const size_t capacity_;
  std::unordered_map<uint64_t, int> map_;
  std::deque<uint64_t> order_;  // insertion order, for eviction (may hold keys already re-recorded)
};

}  // namespace tandem
