#include "cache/layout.h"

namespace tandem {

CacheLayout::CacheLayout(const CacheBufferRegistry& registry, int n_layers, int64_t n_pages)
    : specs_(registry.buffers()), n_layers_(n_layers), n_pages_(n_pages) {
  int64_t offset = 0;
  for (const CacheBufferSpec& s : specs_) {
    const int64_t stride = s.BytesPerToken() * kPageTokens;
    row_bytes_.push_back(s.dtype == CacheDType::kFp8E4M3Scaled ? s.dims : s.BytesPerToken());
    page_stride_.push_back(stride);
    for (int l = 0; l < n_layers; ++l) {
      base_.push_back(offset);
      offset += stride * n_pages;
    }
  }
  total_bytes_ = offset;
}

int64_t CacheLayout::BytesPerPage() const {
  int64_t sum = 0;
  for (int64_t s : page_stride_) sum += s * n_layers_;
  return sum;
}

std::string CacheLayout::Fingerprint() const {
  std::string f = "page_tokens=" + std::to_string(kPageTokens) +
                  ";layers=" + std::to_string(n_layers_);
  for (const CacheBufferSpec& s : specs_) {
    f += ";" + s.name + ":" + CacheDTypeName(s.dtype) + ":" + std::to_string(s.BytesPerToken());
  }
  return f;
}

}  // namespace tandem
