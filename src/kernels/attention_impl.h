// The attention algorithm, one query row at a time, written once and
// instantiated per ISA with that ISA's inline dot, axpy and exp (which all
// follow the canonical orders), so every path computes the same operations in
// the same order: the blocked online softmax of kernel_table.h. The AVX-512
// tiled kernel (attention_avx512.cc) computes exactly these operations too.
#pragma once

#include <cstring>

#include "common/half.h"
#include "kernels/exp_inline.h"
#include "kernels/kernel_table.h"
#include "kernels/weight_row.h"

namespace tandem::kernels {

// The fp32 values of head_dim elements of a K or V row (exact conversion for
// 16-bit storage, into `buf`).
inline const float* KvRow(const PagedRows& rows, int64_t pos, int64_t offset, int hd, KvType type,
                          float* buf) {
  const uint8_t* p = rows.RowBytes(pos) + offset * KvTypeBytes(type);
  if (type == KvType::kF32) return reinterpret_cast<const float*>(p);
  uint16_t h;
  for (int d = 0; d < hd; ++d) {
    std::memcpy(&h, p + 2 * d, 2);
    buf[d] = type == KvType::kF16 ? F16ToFloat(h) : Bf16ToFloat(h);
  }
  return buf;
}

// Ops must provide:
//   static float Dot(const float* a, const float* b, int64_t n);        canonical dot
//   static void Axpy(float a, const float* x, float* y, int64_t n);     y = fma(a, x, y)
//   static void ExpMinus(float* x, int64_t n, float m);                 x[i] = exp(x[i] - m)
template <typename Ops>
void AttentionImpl(const AttentionQueries& queries, const PagedRows& k, const PagedRows& v,
                   const int32_t* positions, const AttentionShape& shape, float* scratch) {
  const int group = shape.n_heads / shape.n_kv_heads;
  const int hd = shape.head_dim;
  const int head_end = shape.head_end < 0 ? shape.n_heads : shape.head_end;
  float* s = scratch;
  float* o = s + kAttentionBlock;
  float* kbuf = o + hd;
  float* vbuf = kbuf + hd;
  for (int i = 0; i < queries.n; ++i) {
    const int64_t n = queries.n_entries[i];
    for (int h = shape.head_begin; h < head_end; ++h) {
      const float* qh = queries.q + i * queries.q_stride + int64_t(h) * hd;
      const int64_t kv_off = int64_t(h / group) * hd;
      float m = -__builtin_huge_valf();
      float l[kLanes] = {};
      std::memset(o, 0, sizeof(float) * size_t(hd));
      for (int64_t b0 = 0; b0 < n; b0 += kAttentionBlock) {
        const int cnt = int(n - b0 < kAttentionBlock ? n - b0 : kAttentionBlock);
        float bm = -__builtin_huge_valf();
        for (int j = 0; j < cnt; ++j) {
          const int64_t pos = positions ? positions[b0 + j] : b0 + j;
          s[j] = Ops::Dot(qh, KvRow(k, pos, kv_off, hd, shape.kv_type, kbuf), hd) * shape.scale;
          bm = s[j] > bm ? s[j] : bm;
        }
        if (bm > m) {
          const float a = ExpInline(m - bm);
          for (int d = 0; d < hd; ++d) o[d] = o[d] * a;
          for (int j = 0; j < kLanes; ++j) l[j] = l[j] * a;
          m = bm;
        }
        Ops::ExpMinus(s, cnt, m);
        for (int j = 0; j < cnt; ++j) l[j % kLanes] = l[j % kLanes] + s[j];
        for (int j = 0; j < cnt; ++j) {
          const int64_t pos = positions ? positions[b0 + j] : b0 + j;
          Ops::Axpy(s[j], KvRow(v, pos, kv_off, hd, shape.kv_type, vbuf), o, hd);
        }
      }
      const float inv = 1.0f / ReduceLanes(l);
      float* oh = queries.out + i * queries.out_stride + int64_t(h) * hd;
      for (int d = 0; d < hd; ++d) oh[d] = o[d] * inv;
    }
  }
}

}  // namespace tandem::kernels
