// Moving pages between pools (or within one) by walking the registry: every
// (buffer, layer) segment of a page is copied, so a buffer added to the
// registry is moved with no change here (invariant 1).
#pragma once

#include <cstdint>

#include "cache/page_pool.h"

namespace tandem {

// Calls fn(buffer, layer, bytes) for every segment of one page, in registry
// then layer order.
template <typename Fn>
void ForEachSegment(const CacheLayout& layout, Fn&& fn) {
  for (CacheBufferId b = 0; b < layout.n_buffers(); ++b) {
    for (int l = 0; l < layout.n_layers(); ++l) fn(b, l, layout.page_stride(b));
  }
}

// Copies every segment of src_page in `src` to dst_page in `dst`.
// Fails (copying nothing) when the two layouts' fingerprints differ.
Status CopyPage(PagePool& src, int32_t src_page, PagePool& dst, int32_t dst_page);

// Copies token slots [0, n_tokens) of src_page to dst_page within one pool:
// every (buffer, layer) segment's rows and, for dtypes that have them, their
// per-token scales. The rest of dst_page is left as it was.
Status CopyPageRows(PagePool& pool, int32_t src_page, int32_t dst_page, int64_t n_tokens);

}  // namespace tandem
