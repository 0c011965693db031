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

}  // namespace tandem
