// Element-wise and per-row CPU kernels of the forward pass. Pure functions
// over spans: no allocation, no locks. Each is bitwise deterministic and the
// same on every ISA (reductions go through the canonical dot of kernel_table.h).
#pragma once

#include <cstdint>

#include "kernels/kernel_table.h"

namespace tandem::kernels {

// exp(x) with a fixed polynomial and explicit FMAs: the same bits everywhere,
// unlike libm's expf. Relative error below 2e-7; exp(x) = 0 for x < -87.3.
float ExpDeterministic(float x);

// out[i] = (x[i] * scale) * weight[i], scale = 1 / sqrt(mean(x^2) + eps).
void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out);

// gate[i] = silu(gate[i]) * up[i].
void SiluMul(float* gate, const float* up, int64_t n);

// x[i] += y[i]
void Add(float* x, const float* y, int64_t n);

// Rotates pairs among the first rot_dims dimensions of every head in place.
// cos/sin hold rot_dims/2 entries for this token's position. neox: pairs are
// (i, i + rot_dims/2); otherwise (2i, 2i+1).
void Rope(float* x, int n_heads, int head_dim, int rot_dims, const float* cos, const float* sin,
          bool neox);

// Attention of query tokens of one sequence over its cache rows, in the
// canonical order of kernel_table.h. positions: the entry list (ascending
// cache positions), or null for 0, 1, 2, ...; entries past a query's
// n_entries are never read for it. scratch: AttentionScratchFloats floats.
void Attention(const AttentionQueries& queries, const PagedRows& k, const PagedRows& v,
               const int32_t* positions, const AttentionShape& shape, float* scratch);
int64_t AttentionScratchFloats(int n_queries, const AttentionShape& shape);

// In-place softmax with the same order as Attention's.
void Softmax(float* x, int64_t n);

}  // namespace tandem::kernels
