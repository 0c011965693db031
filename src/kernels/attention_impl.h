// The attention algorithm, written once and instantiated per ISA with that
// ISA's inline dot, axpy and exp (which all follow the canonical orders), so
// every path computes the same operations in the same order.
#pragma once

#include <cstring>

#include "kernels/kernel_table.h"

namespace tandem::kernels {

// Ops must provide:
//   static float Dot(const float* a, const float* b, int64_t n);        canonical dot
//   static void Axpy(float a, const float* x, float* y, int64_t n);     y = fma(a, x, y)
//   static void ExpMinus(float* x, int64_t n, float m);                 x[i] = exp(x[i] - m)
template <typename Ops>
void AttentionImpl(const float* q, const PagedRows& k, const PagedRows& v,
                   const int32_t* positions, int64_t n_positions, const AttentionShape& shape,
                   float* scratch, float* out) {
  const int group = shape.n_heads / shape.n_kv_heads;
  const int hd = shape.head_dim;
  const int head_end = shape.head_end < 0 ? shape.n_heads : shape.head_end;
  for (int h = shape.head_begin; h < head_end; ++h) {
    const float* qh = q + int64_t(h) * hd;
    const int64_t kv_off = int64_t(h / group) * hd;
    float mx = -__builtin_huge_valf();
    for (int64_t i = 0; i < n_positions; ++i) {
      const int64_t pos = positions ? positions[i] : i;
      const float s = Ops::Dot(qh, k.Row(pos) + kv_off, hd) * shape.scale;
      scratch[i] = s;
      mx = s > mx ? s : mx;
    }
    Ops::ExpMinus(scratch, n_positions, mx);
    float* oh = out + int64_t(h) * hd;
    std::memset(oh, 0, sizeof(float) * size_t(hd));
    float sum = 0.0f;
    for (int64_t i = 0; i < n_positions; ++i) {
      const int64_t pos = positions ? positions[i] : i;
      sum = sum + scratch[i];
      Ops::Axpy(scratch[i], v.Row(pos) + kv_off, oh, hd);
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < hd; ++i) oh[i] = oh[i] * inv;
  }
}

}  // namespace tandem::kernels
