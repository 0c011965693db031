// What other engines hold in their prefix caches, as their KV events say
// (discovery/kv_events.h): per engine, the chain keys of the pages it holds
// (prefix/prefix_index.h names a page by a key that chains every token
// before it, so holding a key means holding that whole prefix's page). A
// router or a decode server places a request where the longest prefix of
// its prompt is held.
//
// A hint, never a promise: an engine may evict a page before the request
// arrives, and the engine that serves it checks its own cache anyway.
//
// Thread safety: every method, from any thread (one mutex).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"

namespace tandem {

class CachedPrefixes {
 public:
  // Keys held per engine at most; more stored keys are dropped (and counted).
  static constexpr size_t kMaxKeysPerEngine = size_t(1) << 22;

  void Stored(const std::string& engine, std::span<const uint64_t> keys);
  void Removed(const std::string& engine, std::span<const uint64_t> keys);
  void Clear(const std::string& engine);   // it holds nothing (now known)
  void Forget(const std::string& engine);  // nothing is known of it any more

  // How many of `chain`'s keys, from the first on, `engine` holds.
  int64_t PrefixPages(const std::string& engine, std::span<const uint64_t> chain) const;
  // The index in `engines` of the one holding the longest prefix of `chain`
  // (at least one page), -1 when none holds any; *pages gets its length.
  int Longest(const std::vector<std::string>& engines, std::span<const uint64_t> chain, int64_t* pages = nullptr) const;

  size_t keys(const std::string& engine) const;
  int64_t dropped() const;

 private:
  mutable Mutex mu_;
  std::unordered_map<std::string, std::unordered_set<uint64_t>> held_ GUARDED_BY(mu_);
  int64_t dropped_ GUARDED_BY(mu_) = 0;
};

}  // namespace tandem
