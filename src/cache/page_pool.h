// The page pool: the memory of every cached token of one engine, handed out
// in pages of kPageTokens tokens. Pages are reference counted so a prefix can
// be shared; a page returns to the free list when its last reference goes.
//
// Accounting invariant, checked by CheckAccounting(): free + used == total.
// Thread safety: none; the engine's loop thread owns its pool.
#pragma once

#include <cstdint>
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
  ~PagePool();
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  const CacheLayout& layout() const { return layout_; }
  int64_t total_pages() const { return layout_.n_pages(); }
  int64_t free_pages() const { return int64_t(free_list_.size()); }
  int64_t used_pages() const { return total_pages() - free_pages(); }

  // Takes n free pages (ref count 1 each), or fails leaving the pool unchanged.
  StatusOr<std::vector<int32_t>> Allocate(int64_t n);
  void AddRef(std::span<const int32_t> pages);
  // Drops one reference of each page. REQUIRES: each page is referenced.
  void Release(std::span<const int32_t> pages);
  int32_t RefCount(int32_t page) const { return ref_[size_t(page)]; }

  // Bytes of (buffer, layer) segment of one page.
  uint8_t* Segment(CacheBufferId b, int layer, int32_t page);
  // A kernel view of one buffer of one layer through a sequence's page table.
  kernels::PagedRows Rows(CacheBufferId b, int layer, std::span<const int32_t> pages);

  Status CheckAccounting() const;

 private:
  CacheLayout layout_;
  std::unique_ptr<uint8_t, void (*)(void*)> arena_;
  std::vector<int32_t> free_list_;
  std::vector<int32_t> ref_;
};

}  // namespace tandem
