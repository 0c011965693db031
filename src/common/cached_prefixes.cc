#include "common/cached_prefixes.h"

namespace tandem {

void CachedPrefixes::Stored(const std::string& engine, std::span<const uint64_t> keys) {
  MutexLock lock(mu_);
  auto& held = held_[engine];
  for (uint64_t k : keys) {
    if (held.size() >= kMaxKeysPerEngine) {
      ++dropped_;
      continue;
    }
    held.insert(k);
  }
}

void CachedPrefixes::Removed(const std::string& engine, std::span<const uint64_t> keys) {
  MutexLock lock(mu_);
  auto it = held_.find(engine);
  if (it == held_.end()) return;
  for (uint64_t k : keys) it->second.erase(k);
}

void CachedPrefixes::Clear(const std::string& engine) {
  MutexLock lock(mu_);
  held_[engine].clear();
}

void CachedPrefixes::Forget(const std::string& engine) {
  MutexLock lock(mu_);
  held_.erase(engine);
}

int64_t CachedPrefixes::PrefixPages(const std::string& engine, std::span<const uint64_t> chain) const {
  MutexLock lock(mu_);
  auto it = held_.find(engine);
  if (it == held_.end()) return 0;
  int64_t n = 0;
  while (size_t(n) < chain.size() && it->second.count(chain[size_t(n)])) ++n;
  return n;
}

int CachedPrefixes::Longest(const std::vector<std::string>& engines, std::span<const uint64_t> chain,
                            int64_t* pages) const {
  int best = -1;
  int64_t most = 0;
  for (size_t i = 0; i < engines.size(); ++i) {
    const int64_t n = PrefixPages(engines[i], chain);
    if (n > most) {
      most = n;
      best = int(i);
    }
  }
  if (pages != nullptr) *pages = most;
  return best;
}

size_t CachedPrefixes::keys(const std::string& engine) const {
  MutexLock lock(mu_);
  auto it = held_.find(engine);
  return it == held_.end() ? 0 : it->second.size();
}

int64_t CachedPrefixes::dropped() const {
  MutexLock lock(mu_);
  return dropped_;
}

}  // namespace tandem
