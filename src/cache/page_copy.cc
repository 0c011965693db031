#include "cache/page_copy.h"

#include <cstring>

namespace tandem {

Status CopyPage(PagePool& src, int32_t src_page, PagePool& dst, int32_t dst_page) {
  if (src.layout().Fingerprint() != dst.layout().Fingerprint()) {
    return FailedPrecondition("cannot copy a page between different cache layouts: '" +
                              src.layout().Fingerprint() + "' vs '" + dst.layout().Fingerprint() + "'");
  }
  if (src_page < 0 || src_page >= src.total_pages() || dst_page < 0 || dst_page >= dst.total_pages()) {
    return OutOfRange("page id out of range");
  }
  ForEachSegment(src.layout(), [&](CacheBufferId b, int l, int64_t bytes) {
    std::memcpy(dst.Segment(b, l, dst_page), src.Segment(b, l, src_page), size_t(bytes));
  });
  return Status::Ok();
}

Status CopyPageRows(PagePool& pool, int32_t src_page, int32_t dst_page, int64_t n_tokens) {
  if (src_page < 0 || src_page >= pool.total_pages() || dst_page < 0 || dst_page >= pool.total_pages()) {
    return OutOfRange("page id out of range");
  }
  if (n_tokens < 0 || n_tokens > kPageTokens) return OutOfRange("a page holds 0 to 64 tokens");
  const CacheLayout& layout = pool.layout();
  ForEachSegment(layout, [&](CacheBufferId b, int l, int64_t) {
    const uint8_t* from = pool.Segment(b, l, src_page);
    uint8_t* to = pool.Segment(b, l, dst_page);
    std::memcpy(to, from, size_t(n_tokens * layout.row_bytes(b)));
    if (const int64_t scales = layout.scale_offset(b); scales >= 0) {
      std::memcpy(to + scales, from + scales, size_t(n_tokens) * sizeof(float));
    }
  });
  return Status::Ok();
}

}  // namespace tandem
