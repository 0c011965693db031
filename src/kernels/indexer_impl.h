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
template <typename Ops>
void IndexerScoresImpl(const IndexerQuery& query, const PagedRows& keys, bool fp8,
                       int64_t begin, int64_t end, float* scores, float* key_scratch) {
  const int64_t dims = query.dims;
  for (int64_t pos = begin; pos < end; ++pos) {
    const uint8_t* row = keys.RowBytes(pos);
    float scale = 1.0f;
    if (fp8) {
      Ops::DecodeFp8(row, dims, key_scratch);
      scale = *keys.Scale(pos);
    } else {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < dims; ++i) key_scratch[i] = Bf16ToFloat(h[i]);
    }
    float acc = 0.0f;
    for (int h = 0; h < query.n_heads; ++h) {
      float d = Ops::Dot(query.q + h * dims, key_scratch, dims);
      if (fp8) d = d * scale;
      acc = __builtin_fmaf(query.w[h], d > 0.0f ? d : 0.0f, acc);
    }
    scores[pos - begin] = acc;
  }
}

}  // namespace tandem::kernels
