#include "prefix/prefix_index.h"

#include "common/chain_key.h"

#include <algorithm>
#include <string>
#include <unordered_set>

namespace tandem {
namespace {

std::span<const int32_t> PageTokens(std::span<const int32_t> tokens, int64_t page) {
  return tokens.subspan(size_t(page) * kPageTokens, kPageTokens);
}

}  // namespace

// common/chain_key.h: the same key on every engine (KV events carry it to
// other hosts; tandem builds for little-endian x86-64 only, so the tokens'
// bytes are the same everywhere).
uint64_t PrefixIndex::DefaultChainKey(uint64_t parent_key, std::span<const int32_t> page_tokens) {
  return ChainKey(parent_key, page_tokens);
}

PrefixIndex::PrefixIndex(PagePool& pool, ChainKeyFn chain_key)
    : pool_(pool), chain_key_(chain_key) {}

PrefixIndex::~PrefixIndex() { Clear(); }

bool PrefixIndex::Holds(const Entry& e, const Entry* parent, std::span<const int32_t> page_tokens, uint64_t root) {
  return e.parent == parent && (parent != nullptr || e.root == root) &&
         std::equal(page_tokens.begin(), page_tokens.end(), e.tokens.begin());
}

PrefixIndex::Entry* PrefixIndex::FindChild(const Entry* parent, std::span<const int32_t> page_tokens,
                                           uint64_t root) {
  const uint64_t key = chain_key_(parent ? parent->key : root, page_tokens);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  // Same key but a different prefix is a collision: never a match.
  return Holds(it->second, parent, page_tokens, root) ? &it->second : nullptr;
}

void PrefixIndex::TouchChain(std::span<Entry* const> chain) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    lru_.splice(lru_.end(), lru_, (*it)->lru);
  }
}

void PrefixIndex::DropPartial(PartialKey after) {
  auto it = partials_.find(after);
  if (it == partials_.end()) return;
  const int32_t page = it->second.page;
  partial_lru_.erase(it->second.lru);
  partials_.erase(it);
  pool_.Release({&page, 1});
}

void PrefixIndex::Remove(Entry* e) {
  TANDEM_CHECK_MSG(e->children == 0, "removing a prefix entry that still has children");
  DropPartial(After(e, 0));
  if (e->parent != nullptr) --e->parent->children;
  lru_.erase(e->lru);
  const int32_t page = e->page;
  entries_.erase(e->key);
  pool_.Release({&page, 1});
}

PrefixIndex::Match PrefixIndex::Lookup(std::span<const int32_t> tokens, int64_t max_tokens, bool partial,
                                       uint64_t root) {
  ++stats_.lookups;
  stats_.lookup_tokens += int64_t(tokens.size());
  const int64_t limit = std::clamp<int64_t>(max_tokens, 0, int64_t(tokens.size()));
  const int64_t n_pages = limit / kPageTokens;

  std::vector<Entry*> chain;
  Entry* parent = nullptr;
  for (int64_t i = 0; i < n_pages; ++i) {
    Entry* e = FindChild(parent, PageTokens(tokens, i), root);
    if (e == nullptr) break;
    chain.push_back(e);
    parent = e;
  }
  TouchChain(chain);

  Match match;
  match.pages.reserve(chain.size());
  for (const Entry* e : chain) match.pages.push_back(e->page);
  pool_.AddRef(match.pages);
  match.tokens = int64_t(match.pages.size()) * kPageTokens;
  stats_.hit_tokens += match.tokens;
  const Entry* last = chain.empty() ? nullptr : chain.back();
  auto it = partial ? partials_.find(After(last, root)) : partials_.end();
  if (it != partials_.end()) {
    const int64_t left = std::min<int64_t>(limit - match.tokens, it->second.n);
    int64_t same = 0;
    while (same < left && tokens[size_t(match.tokens + same)] == it->second.tokens[size_t(same)]) ++same;
    if (same > 0) {
      match.partial_page = it->second.page;
      match.partial_tokens = same;
      pool_.AddRef({&match.partial_page, 1});
      partial_lru_.splice(partial_lru_.end(), partial_lru_, it->second.lru);
      stats_.hit_tokens += same;
      stats_.partial_hit_tokens += same;
    }
  }
  return match;
}

int64_t PrefixIndex::Insert(std::span<const int32_t> tokens, std::span<const int32_t> pages, bool with_partial,
                            uint64_t root) {
  const int64_t n_pages =
      std::min<int64_t>(int64_t(tokens.size()) / kPageTokens, int64_t(pages.size()));
  std::vector<Entry*> chain;
  Entry* parent = nullptr;
  int64_t inserted = 0;
  Event stored;  // the new entries follow the indexed ones: one chain
  for (int64_t i = 0; i < n_pages; ++i) {
    const std::span<const int32_t> page_tokens = PageTokens(tokens, i);
    const uint64_t key = chain_key_(parent ? parent->key : root, page_tokens);
    auto [it, fresh] = entries_.try_emplace(key);
    Entry& e = it->second;
    if (!fresh) {
      // Already indexed: keep the existing page. A different prefix under the
      // same key (collision) ends the chain: children need this entry.
      if (!Holds(e, parent, page_tokens, root)) break;
    } else {
      pool_.AddRef(pages.subspan(size_t(i), 1));  // CHECK-fails on an unreferenced page
      e.key = key;
      e.parent = parent;
      e.root = root;
      e.page = pages[size_t(i)];
      std::copy(page_tokens.begin(), page_tokens.end(), e.tokens.begin());
      e.lru = lru_.insert(lru_.end(), &e);
      if (parent != nullptr) ++parent->children;
      ++inserted;
      if (event_hook_) {
        if (stored.keys.empty()) {
          stored.parent_key = parent ? parent->key : root;
          stored.from_root = parent == nullptr;
        }
        stored.keys.push_back(key);
        stored.tokens.insert(stored.tokens.end(), page_tokens.begin(), page_tokens.end());
      }
    }
    chain.push_back(&e);
    parent = &e;
  }
  TouchChain(chain);
  stats_.inserted_pages += inserted;
  if (event_hook_ && !stored.keys.empty()) event_hook_(std::move(stored));
  const int64_t rest = int64_t(tokens.size()) - n_pages * kPageTokens;
  if (with_partial && int64_t(chain.size()) == n_pages && rest > 0 && rest < kPageTokens &&
      int64_t(pages.size()) > n_pages) {
    const int32_t page = pages[size_t(n_pages)];
    const PartialKey after = After(parent, root);
    auto old = partials_.find(after);
    const bool covered = old != partials_.end() && old->second.n >= rest &&
                         std::equal(tokens.begin() + n_pages * kPageTokens, tokens.end(), old->second.tokens.begin());
    if (covered) return inserted;  // the one there holds these tokens and more (a copy of its rows retiring)
    DropPartial(after);  // otherwise the newest partial page after this chain wins
    pool_.AddRef({&page, 1});  // CHECK-fails on an unreferenced page
    Partial& p = partials_[after];
    p.page = page;
    p.n = int32_t(rest);
    std::copy(tokens.begin() + n_pages * kPageTokens, tokens.end(), p.tokens.begin());
    p.lru = partial_lru_.insert(partial_lru_.end(), after);
  }
  return inserted;
}

int64_t PrefixIndex::Evict(int64_t n) {
  int64_t freed = 0;
  // Partial pages first (at most 63 tokens each to recompute), least recently used first.
  for (auto it = partial_lru_.begin(); it != partial_lru_.end() && freed < n;) {
    const PartialKey after = *it;
    ++it;
    if (pool_.RefCount(partials_.at(after).page) != 1) continue;
    DropPartial(after);
    ++freed;
  }
  Event removed;
  removed.kind = Event::Kind::kRemoved;
  // Children precede their parents in LRU order, so a parent left childless
  // by this walk is still ahead of the cursor and is considered in turn.
  for (auto it = lru_.begin(); it != lru_.end() && freed < n;) {
    Entry* e = *it;
    ++it;  // advance first: Remove erases e's node (never the parent's)
    if (e->children > 0 || pool_.RefCount(e->page) != 1) continue;
    if (evict_hook_) {
      evict_hook_(e->key, ParentKey(*e),
                  std::span<const int32_t>(e->tokens.data(), e->tokens.size()), e->page);
    }
    if (event_hook_) removed.keys.push_back(e->key);
    Remove(e);
    ++freed;
  }
  stats_.evicted_pages += freed;
  if (event_hook_ && !removed.keys.empty()) event_hook_(std::move(removed));
  return freed;
}

int64_t PrefixIndex::evictable_pages() const {
  // An entry is pinned if its page or any descendant's page has an outside
  // reference. Walk up from each outside-referenced page; stop at the first
  // ancestor already pinned (its own ancestors are pinned too).
  std::unordered_set<const Entry*> pinned;
  for (const auto& [key, e] : entries_) {
    if (pool_.RefCount(e.page) == 1) continue;
    for (const Entry* p = &e; p != nullptr && pinned.insert(p).second; p = p->parent) {
    }
  }
  int64_t partial_pinned = 0;
  for (const auto& [parent, p] : partials_) partial_pinned += pool_.RefCount(p.page) != 1;
  return cached_pages() - int64_t(pinned.size()) - partial_pinned;
}

void PrefixIndex::Clear() {
  std::vector<int32_t> pages;
  pages.reserve(entries_.size() + partials_.size());
  for (const auto& [key, e] : entries_) pages.push_back(e.page);
  for (const auto& [parent, p] : partials_) pages.push_back(p.page);
  partials_.clear();
  partial_lru_.clear();
  lru_.clear();
  const bool any = !entries_.empty();
  entries_.clear();
  pool_.Release(pages);
  if (event_hook_ && any) {
    Event cleared;
    cleared.kind = Event::Kind::kCleared;
    event_hook_(std::move(cleared));
  }
}

Status PrefixIndex::CheckInvariants() const {
  if (lru_.size() != entries_.size()) return Internal("prefix index: LRU list size mismatch");
  std::unordered_map<const Entry*, int64_t> position;
  int64_t pos = 0;
  for (const Entry* e : lru_) position[e] = pos++;

  std::unordered_map<const Entry*, int32_t> children;
  std::unordered_set<int32_t> pages;
  for (const auto& [key, e] : entries_) {
    const std::string where = "prefix index entry for page " + std::to_string(e.page) + ": ";
    if (e.key != key || chain_key_(ParentKey(e), e.tokens) != key) {
      return Internal(where + "key does not match its tokens and parent");
    }
    if (!position.contains(&e) || *e.lru != &e) return Internal(where + "not in the LRU list");
    if (e.page < 0 || e.page >= pool_.total_pages() || pool_.RefCount(e.page) < 1) {
      return Internal(where + "page is not referenced");
    }
    if (!pages.insert(e.page).second) return Internal(where + "page indexed twice");
    if (e.parent != nullptr) {
      auto parent = entries_.find(e.parent->key);
      if (parent == entries_.end() || &parent->second != e.parent) {
        return Internal(where + "parent is not indexed");
      }
      if (position.at(&e) > position.at(e.parent)) {
        return Internal(where + "more recently used than its parent");
      }
      ++children[e.parent];
    }
  }
  for (const auto& [key, e] : entries_) {
    auto it = children.find(&e);
    if (e.children != (it == children.end() ? 0 : it->second)) {
      return Internal("prefix index entry for page " + std::to_string(e.page) +
                      ": child count is wrong");
    }
  }
  if (partial_lru_.size() != partials_.size()) return Internal("prefix index: partial LRU list size mismatch");
  for (const auto& [after, p] : partials_) {
    const std::string where = "prefix index partial page " + std::to_string(p.page) + ": ";
    const Entry* parent = after.first;
    if (parent != nullptr && (!entries_.contains(parent->key) || &entries_.at(parent->key) != parent)) {
      return Internal(where + "its parent is not indexed");
    }
    if (p.n < 1 || p.n >= kPageTokens) return Internal(where + "holds " + std::to_string(p.n) + " tokens");
    if (*p.lru != after) return Internal(where + "not in the partial LRU list");
    if (p.page < 0 || p.page >= pool_.total_pages() || pool_.RefCount(p.page) < 1) {
      return Internal(where + "page is not referenced");
    }
    if (!pages.insert(p.page).second) return Internal(where + "page indexed twice");
  }
  return Status::Ok();
}

}  // namespace tandem
