// The prefix index: which full cache pages already hold which token prefixes,
// so a request whose prompt starts with cached tokens (multi-turn chats resend
// the whole history) reuses those pages instead of recomputing them.
//
// It is a radix tree at page granularity. Page i of a sequence holds tokens
// [64 i, 64 i + 64); its key chains the key of page i - 1:
//   key_i = XXH3_64(tokens of page i, seed = key_{i-1}),  key_{-1} = kRootSeed
// so one key names a whole prefix. Keys only find candidates: every entry also
// stores its 64 tokens and its parent, and a match requires both to agree, so
// a hash collision can never hand out pages holding other tokens.
//
// Partial pages: a sequence's last page, when it holds fewer than 64 computed
// tokens, is kept too when the sequence retires (Insert with_partial): one
// per parent entry (the newest), a leaf that is never handed out itself. A
// lookup that asks for it gets the longest run of its tokens the request
// shares, and copies those rows into a page of its own (CopyPageRows), so a
// cached prefix is reused to the token, not only to the page. Partial pages
// publish no events (KV events name whole pages) and are evicted first.
//
// Ownership: the index holds one pool reference on every page it caches. A
// page is "free to evict" when that is its only reference (RefCount == 1).
//
// Invariants (checked by CheckInvariants()):
//   - every entry's parent is indexed, and its child count is exact;
//   - in LRU order every entry is older than its parent, because every touch
//     covers a whole chain from the root and touches it leaf first. Evict
//     relies on this to free a chain in one pass, leaf to root.
//
// Thread safety: none. The engine's loop thread owns the index and its pool.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/layout.h"
#include "common/chain_key.h"
#include "cache/page_pool.h"
#include "common/status.h"

namespace tandem {

class PrefixIndex {
 public:
  // How a page's key chains from its parent's key (for the first page, the
  // tenant's root: kRootSeed without tenants, common/chain_key.h). The default is XXH3_64 of the page's tokens seeded by the parent key.
  using ChainKeyFn = uint64_t (*)(uint64_t parent_key, std::span<const int32_t> page_tokens);
  static uint64_t DefaultChainKey(uint64_t parent_key, std::span<const int32_t> page_tokens);

  // REQUIRES: `pool` outlives the index.
  explicit PrefixIndex(PagePool& pool) : PrefixIndex(pool, &DefaultChainKey) {}
  // For tests: a degenerate `chain_key` forces collisions so the token and
  // parent comparisons that keep them harmless can be exercised.
  PrefixIndex(PagePool& pool, ChainKeyFn chain_key);
  // Releases every page the index holds.
  ~PrefixIndex();
  PrefixIndex(const PrefixIndex&) = delete;
  PrefixIndex& operator=(const PrefixIndex&) = delete;

  struct Match {
    std::vector<int32_t> pages;
    int64_t tokens = 0;  // always pages.size() * kPageTokens
    // With `partial`: a cached partial page whose first partial_tokens rows
    // are the request's next tokens (one reference for the caller), or -1.
    int32_t partial_page = -1;
    int64_t partial_tokens = 0;
  };

  // The longest cached prefix of `tokens` made of whole pages and covering at
  // most `max_tokens` tokens (callers pass tokens.size() - 1 so that at least
  // one token is left to compute). Each returned page carries one reference
  // for the caller, who Releases it later. Matched entries become most
  // recently used.
  // With `partial`, also the partial page that continues the match, if any
  // (the caller copies its rows and Releases it).
  // `root`: the tenant's (common/chain_key.h, CacheRoot): only pages indexed
  // under the same root are found.
  Match Lookup(std::span<const int32_t> tokens, int64_t max_tokens, bool partial = false,
               uint64_t root = kChainRootSeed);

  // Indexes the full pages of a sequence: page i holds tokens [64 i, 64 i + 64).
  // Only the first min(tokens.size() / 64, pages.size()) pages are considered.
  // A page whose prefix is already indexed is skipped (the indexed page stays;
  // the caller's copy is not referenced). A new entry takes one reference on
  // its page. If a key is taken by a different prefix (a hash collision), the
  // rest of the sequence is not indexed. Touched entries become most recently
  // used. Returns how many pages were newly indexed.
  // REQUIRES: every considered page is referenced (allocated).
  // with_partial: the sequence is done with its pages (it retires), so its
  // last page, if tokens end inside it, is kept as the partial page after
  // the indexed chain (replacing the one there).
  int64_t Insert(std::span<const int32_t> tokens, std::span<const int32_t> pages, bool with_partial = false,
                 uint64_t root = kChainRootSeed);

  // Frees up to n pages that only the index references, least recently used
  // first, and only leaves (entries with no indexed child), so that every
  // cached chain stays reachable from its root. A parent freed of its last
  // child becomes a leaf and may go in the same call. Never releases a page
  // someone else still references. Returns how many pages were released.
  // Cost: one walk over the LRU list.
  int64_t Evict(int64_t n);

  // Called by Evict for each page just before the index lets it go (the page
  // is still intact): a lower cache tier may keep a copy (write-back).
  using EvictHook = std::function<void(uint64_t key, uint64_t parent_key, std::span<const int32_t> tokens, int32_t page)>;
  void SetEvictHook(EvictHook hook) { evict_hook_ = std::move(hook); }

  // What the index now holds, as it changes (the KV events other engines
  // place requests by): pages stored (one chain: each page's key, the key
  // before the first — the tenant's root for a prompt's first page — and all their
  // tokens), pages removed, or everything cleared. Called on the caller's
  // thread, inside Insert, Evict and Clear.
  struct Event {
    enum class Kind { kStored, kRemoved, kCleared } kind = Kind::kStored;
    std::vector<uint64_t> keys;
    uint64_t parent_key = kRootSeed;  // kStored (the chain's root for a first page)
    bool from_root = false;           // kStored: keys[0] is a prompt's first page (parent_key is a root)
    std::vector<int32_t> tokens;      // kStored: kPageTokens per key
  };
  using EventHook = std::function<void(Event)>;
  void SetEventHook(EventHook hook) { event_hook_ = std::move(hook); }

  int64_t cached_pages() const { return int64_t(entries_.size() + partials_.size()); }
  int64_t partial_pages() const { return int64_t(partials_.size()); }
  // Pages Evict could free right now: entries whose page and every indexed
  // descendant's page are referenced only by the index.
  int64_t evictable_pages() const;

  // Releases everything (pages others reference stay with them). Stats stay.
  void Clear();

  // Monotonic counters for metrics. lookup_tokens sums tokens.size() of every
  // Lookup, so hit_tokens / lookup_tokens is the prompt hit rate.
  struct Stats {
    int64_t lookups = 0, lookup_tokens = 0, hit_tokens = 0, inserted_pages = 0, evicted_pages = 0;
    int64_t partial_hit_tokens = 0;  // of hit_tokens, those from partial pages
  };
  const Stats& stats() const { return stats_; }

  // Verifies the invariants above and that every cached page is referenced.
  // For tests and idle-time integrity checks; O(cached pages).
  Status CheckInvariants() const;

  static constexpr uint64_t kRootSeed = kChainRootSeed;  // common/chain_key.h

 private:
  struct Entry;
  using LruList = std::list<Entry*>;  // front = least recently used

  struct Entry {
    uint64_t key = 0;
    Entry* parent = nullptr;  // nullptr for a sequence's first page
    uint64_t root = kRootSeed;  // the key before the chain's first page (its tenant's)
    int32_t page = -1;
    int32_t children = 0;  // indexed entries whose parent is this one
    std::array<int32_t, kPageTokens> tokens{};
    LruList::iterator lru;
  };

  // Whether `e` is the page `page_tokens` right after `parent`; a key match
  // alone is not enough.
  static bool Holds(const Entry& e, const Entry* parent, std::span<const int32_t> page_tokens, uint64_t root);
  static uint64_t ParentKey(const Entry& e) { return e.parent != nullptr ? e.parent->key : e.root; }
  // The entry for the page `page_tokens` following `parent` (under `root`
  // when parent is null), or nullptr. A key hit whose tokens, parent or root
  // differ (a collision) is reported as a miss.
  Entry* FindChild(const Entry* parent, std::span<const int32_t> page_tokens, uint64_t root);
  // Moves a root-to-leaf chain to the most recent end, leaf first, so each
  // entry ends up older than its parent.
  void TouchChain(std::span<Entry* const> chain);
  // Drops the entry (and the partial page after it) and the index's
  // reference on its page.
  void Remove(Entry* e);

  // What a partial page follows: an entry, or (entry null) a tenant's root.
  using PartialKey = std::pair<const Entry*, uint64_t>;
  static PartialKey After(const Entry* parent, uint64_t root) { return {parent, parent != nullptr ? 0 : root}; }
  struct Partial {
    int32_t page = -1;
    int32_t n = 0;  // tokens, 1..63
    std::array<int32_t, kPageTokens> tokens{};
    std::list<PartialKey>::iterator lru;
  };
  void DropPartial(PartialKey after);

  PagePool& pool_;
  const ChainKeyFn chain_key_;
  // unordered_map never moves its values, so Entry* stays valid until erase.
  std::unordered_map<uint64_t, Entry> entries_;
  LruList lru_;
  std::map<PartialKey, Partial> partials_;
  std::list<PartialKey> partial_lru_;  // front = least recently used
  Stats stats_;
  EvictHook evict_hook_;
  EventHook event_hook_;
};

}  // namespace tandem
