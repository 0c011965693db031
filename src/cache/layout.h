// The cache layout derived from the registry: where each (buffer, layer)
// segment of a page lives in the pool's memory, and a fingerprint of it all.
//
// Memory is one arena. For buffer b and layer l the segment region starts at
// SegmentBase(b, l); page p's part of it is page_stride(b) bytes at
// base + p * page_stride(b). Within a page, token slot i's row is at
// i * row_bytes(b) (per-token scales, when a dtype has them, follow all rows).
#pragma once

#include "common/chain_key.h"

#include <cstdint>
#include <string>
#include <vector>

#include "cache/registry.h"

namespace tandem {

constexpr int kPageTokens = 64;
static_assert(kPageTokens == int(kChainPageTokens), "a page's tokens are the chain keys' page (common/chain_key.h)");

class CacheLayout {
 public:
  CacheLayout(const CacheBufferRegistry& registry, int n_layers, int64_t n_pages);

  int n_layers() const { return n_layers_; }
  int64_t n_pages() const { return n_pages_; }
  int32_t n_buffers() const { return int32_t(specs_.size()); }
  const CacheBufferSpec& spec(CacheBufferId b) const { return specs_[size_t(b)]; }

  int64_t row_bytes(CacheBufferId b) const { return row_bytes_[size_t(b)]; }
  int64_t page_stride(CacheBufferId b) const { return page_stride_[size_t(b)]; }
  // Offset of the per-token scales within a page, or -1 for dtypes without them.
  int64_t scale_offset(CacheBufferId b) const {
    return specs_[size_t(b)].dtype == CacheDType::kFp8E4M3Scaled ? row_bytes(b) * kPageTokens : -1;
  }
  int64_t SegmentBase(CacheBufferId b, int layer) const {
    return base_[size_t(b) * size_t(n_layers_) + size_t(layer)];
  }
  int64_t TotalBytes() const { return total_bytes_; }
  // Bytes of one page across all buffers and layers.
  int64_t BytesPerPage() const;

  // Page size, and every buffer's name, dtype and bytes per token. Two engines
  // whose fingerprints differ cannot exchange pages.
  std::string Fingerprint() const;

 private:
  std::vector<CacheBufferSpec> specs_;
  int n_layers_;
  int64_t n_pages_;
  std::vector<int64_t> row_bytes_, page_stride_, base_;
  int64_t total_bytes_ = 0;
};

}  // namespace tandem
