// The page pool: the memory of every cached token of one engine, handed out
// in pages of kPageTokens tokens. A page is free, reserved (set aside for data
// that will arrive, e.g. a handoff; not yet readable) or used (reference
// counted, so a prefix can be shared). A used page returns to the free list
// when its last reference goes. Every return to the free list bumps the
// page's generation, so a stale (page, generation) pair is detectable.
//
// Accounting invariant, checked by CheckAccounting(): free + used + reserved == total.
// Thread safety: none; the engine's loop thread owns its pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "cache/layout.h"
#include "common/status.h"
#include "kernels/ops.h"

namespace tandem {

class PagePool {
 public:
  PagePool(const CacheBufferRegistry& registry, int n_layers, int64_t n_pages);
  // Uses `arena` (at least layout().TotalBytes(), e.g. transport-registered
  // memory that peers write into) instead of allocating; the caller keeps it alive.
  PagePool(const CacheBufferRegistry& registry, int n_layers, int64_t n_pages, uint8_t* arena);
  ~PagePool();
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  const CacheLayout& layout() const { return layout_; }
  int64_t total_pages() const { return layout_.n_pages(); }
  int64_t free_pages() const { return int64_t(free_list_.size()); }
  int64_t reserved_pages() const { return reserved_; }
  int64_t used_pages() const { return total_pages() - free_pages() - reserved_pages(); }

  struct Accounting {
    int64_t free = 0, used = 0, reserved = 0, total = 0;
    bool operator==(const Accounting&) const = default;
  };
  Accounting accounting() const { return {free_pages(), used_pages(), reserved_pages(), total_pages()}; }

  // Takes n free pages (ref count 1 each), or fails leaving the pool unchanged.
  StatusOr<std::vector<int32_t>> Allocate(int64_t n);
  // Sets n free pages aside (not readable, not referenced), or fails leaving the pool unchanged.
  StatusOr<std::vector<int32_t>> Reserve(int64_t n);
  // Reserved -> used with ref count 1 (the data has landed).
  void CommitReservation(std::span<const int32_t> pages);
  // Reserved -> free.
  void CancelReservation(std::span<const int32_t> pages);
  uint32_t Generation(int32_t page) const { return generation_[size_t(page)]; }
  void AddRef(std::span<const int32_t> pages);
  // Drops one reference of each page. REQUIRES: each page is referenced.
  void Release(std::span<const int32_t> pages);
  int32_t RefCount(int32_t page) const { return ref_[size_t(page)]; }

  // Bytes of (buffer, layer) segment of one page.
  uint8_t* Segment(CacheBufferId b, int layer, int32_t page);
  uint8_t* arena() { return arena_.get(); }
  // A kernel view of one buffer of one layer through a sequence's page table.
  kernels::PagedRows Rows(CacheBufferId b, int layer, std::span<const int32_t> pages);

  Status CheckAccounting() const;

  // Called with each page the moment it is freed or reserved, and at once
  // with every page free when it is set; none by default (one untaken branch
  // per freed page). The fault library's page poisoning
  // (faults/page_poison.h) scribbles them, so a read before its data has
  // landed gives garbage instead of stale bytes that happen to be right.
  using PageHook = std::function<void(PagePool& pool, int32_t page)>;
  void SetPageHook(PageHook hook);
  const PageHook& page_hook() const { return hook_; }

 private:
  PagePool(const CacheBufferRegistry& registry, int n_layers, int64_t n_pages, uint8_t* arena,
           void (*deleter)(void*));

  CacheLayout layout_;
  std::unique_ptr<uint8_t, void (*)(void*)> arena_;
  std::vector<int32_t> free_list_;
  std::vector<int32_t> ref_;         // > 0 used, 0 free, kReserved reserved
  std::vector<uint32_t> generation_;
  int64_t reserved_ = 0;
  PageHook hook_;
  static constexpr int32_t kReserved = -1;
};

}  // namespace tandem
