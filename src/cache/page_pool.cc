#include "cache/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tandem {
namespace {

// Cache reads gather rows from all over the arena (sparse attention's top-k,
// paged tables): on 2 MiB pages where the kernel offers them, far fewer of
// those reads miss the TLB.
constexpr size_t kHugePage = size_t(2) << 20;

uint8_t* AllocateArena(int64_t bytes) {
  const size_t align = size_t(bytes) >= kHugePage ? kHugePage : 4096;
  const size_t rounded = std::max<size_t>(align, (size_t(bytes) + align - 1) / align * align);
  void* p = std::aligned_alloc(align, rounded);
  TANDEM_CHECK_MSG(p != nullptr, "page pool allocation failed");
  if (align == kHugePage) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
  std::memset(p, 0, rounded);
  return static_cast<uint8_t*>(p);
}

}  // namespace

PagePool::PagePool(const CacheBufferRegistry& registry, int n_layers, int64_t n_pages)
    : PagePool(registry, n_layers, n_pages,
               AllocateArena(CacheLayout(registry, n_layers, n_pages).TotalBytes()), &std::free) {}

PagePool::PagePool(const CacheBufferRegistry& registry, int n_layers, int64_t n_pages, uint8_t* arena)
    : PagePool(registry, n_layers, n_pages, arena, [](void*) {}) {}

PagePool::PagePool(const CacheBufferRegistry& registry, int n_layers, int64_t n_pages, uint8_t* arena,
                   void (*deleter)(void*))
    : layout_(registry, n_layers, n_pages),
      arena_(arena, deleter),
      ref_(size_t(n_pages), 0),
      generation_(size_t(n_pages), 0) {
  free_list_.reserve(size_t(n_pages));
  // Hand out low page ids first: pop from the back.
  for (int64_t p = n_pages - 1; p >= 0; --p) free_list_.push_back(int32_t(p));
}

PagePool::~PagePool() = default;

StatusOr<std::vector<int32_t>> PagePool::Allocate(int64_t n) {
  if (n < 0 || n > free_pages()) {
    return ResourceExhausted("need " + std::to_string(n) + " cache pages, " +
                             std::to_string(free_pages()) + " free of " +
                             std::to_string(total_pages()));
  }
  std::vector<int32_t> pages(static_cast<size_t>(n));
  for (auto& p : pages) {
    p = free_list_.back();
    free_list_.pop_back();
    ref_[size_t(p)] = 1;
  }
  return pages;
}

StatusOr<std::vector<int32_t>> PagePool::Reserve(int64_t n) {
  TANDEM_ASSIGN_OR_RETURN(std::vector<int32_t> pages, Allocate(n));
  for (int32_t p : pages) {
    ref_[size_t(p)] = kReserved;
    if (hook_) hook_(*this, p);
  }
  reserved_ += n;
  return pages;
}

void PagePool::CommitReservation(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    TANDEM_CHECK_MSG(ref_[size_t(p)] == kReserved, "commit of a page that is not reserved");
    ref_[size_t(p)] = 1;
    --reserved_;
  }
}

void PagePool::CancelReservation(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    TANDEM_CHECK_MSG(ref_[size_t(p)] == kReserved, "cancel of a page that is not reserved");
    ref_[size_t(p)] = 0;
    --reserved_;
    ++generation_[size_t(p)];
    if (hook_) hook_(*this, p);
    free_list_.push_back(p);
  }
}

void PagePool::AddRef(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    TANDEM_CHECK(ref_[size_t(p)] > 0);
    ++ref_[size_t(p)];
  }
}

void PagePool::Release(std::span<const int32_t> pages) {
  for (int32_t p : pages) {
    TANDEM_CHECK_MSG(p >= 0 && p < total_pages() && ref_[size_t(p)] > 0, "double release");
    if (--ref_[size_t(p)] == 0) {
      ++generation_[size_t(p)];
      if (hook_) hook_(*this, p);
      free_list_.push_back(p);
    }
  }
}

void PagePool::SetPageHook(PageHook hook) {
  hook_ = std::move(hook);
  if (hook_) {
    for (int32_t p : free_list_) hook_(*this, p);
  }
}

uint8_t* PagePool::Segment(CacheBufferId b, int layer, int32_t page) {
  return arena_.get() + layout_.SegmentBase(b, layer) + int64_t(page) * layout_.page_stride(b);
}

kernels::PagedRows PagePool::Rows(CacheBufferId b, int layer, std::span<const int32_t> pages) {
  kernels::PagedRows rows;
  rows.base = arena_.get() + layout_.SegmentBase(b, layer);
  rows.pages = pages.data();
  rows.page_stride = layout_.page_stride(b);
  rows.row_bytes = layout_.row_bytes(b);
  rows.page_tokens = kPageTokens;
  rows.scale_offset = layout_.scale_offset(b);
  return rows;
}

Status PagePool::CheckAccounting() const {
  int64_t referenced = 0, reserved = 0, free = 0;
  for (int32_t r : ref_) {
    if (r < kReserved) return Internal("negative page reference count");
    referenced += r > 0;
    reserved += r == kReserved;
    free += r == 0;
  }
  if (free != free_pages() || reserved != reserved_ || referenced + reserved + free != total_pages()) {
    return Internal("page accounting broken: " + std::to_string(referenced) + " used + " +
                    std::to_string(reserved) + " reserved + " + std::to_string(free) +
                    " free (free list " + std::to_string(free_pages()) + ") vs total " +
                    std::to_string(total_pages()));
  }
  return Status::Ok();
}

}  // namespace tandem
