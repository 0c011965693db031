// The lightning indexer's scoring, written once and instantiated per ISA with
// that ISA's canonical dot, so every path gives the same bits:
//
//   score(s) = sum over heads h, in order, of fma(w[h], max(d_h(s), 0), acc)
//   d_h(s)   = dot(q_h, key(s)) * scale(s)      (fp8: key = exact e4m3 values)
//   d_h(s)   = dot(q_h, key(s))                 (bf16: key = exact bf16 values)
#pragma once

#include "common/half.h"
#include "kernels/kernel_table.h"

namespace tandem::kernels {

// Ops must provide static Dot (canonical) and DecodeFp8(const uint8_t*, int64_t n, float* out).
// Query by query, position by position: the definition the tiled kernels match.
template <typename Ops>
void IndexerScoresImpl(const IndexerQueries& queries, const PagedRows& keys, bool fp8,
                       int64_t begin, int64_t end, float* scores, int64_t scores_stride,
                       float* scratch) {
  const int64_t dims = queries.dims;
  float* key = scratch;
  for (int i = 0; i < queries.n; ++i) {
    const float* q = queries.q + i * queries.q_stride;
    const float* w = queries.w + i * queries.w_stride;
    float* out = scores + i * scores_stride;
    for (int64_t pos = begin; pos < end; ++pos) {
      const uint8_t* row = keys.RowBytes(pos);
      float scale = 1.0f;
      if (fp8) {
        Ops::DecodeFp8(row, dims, key);
        scale = *keys.Scale(pos);
      } else {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
        for (int64_t d = 0; d < dims; ++d) key[d] = Bf16ToFloat(h[d]);
      }
      float acc = 0.0f;
      for (int h = 0; h < queries.n_heads; ++h) {
        float d = Ops::Dot(q + h * dims, key, dims);
        if (fp8) d = d * scale;
        acc = __builtin_fmaf(w[h], d > 0.0f ? d : 0.0f, acc);
      }
      out[pos - begin] = acc;
    }
  }
}

}  // namespace tandem::kernels
