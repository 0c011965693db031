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

}  // namespace tandem
