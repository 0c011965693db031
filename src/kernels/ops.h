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

// Causal attention of one query token over cache positions. When positions is
// null it attends to [0, n_positions); otherwise to the listed positions
// (ascending). q: n_heads * head_dim; out: n_heads * head_dim.
// scratch: at least n_positions floats. Softmax: max, then exp and sum in
// position order, then out = (sum_s p_s v_s) * (1 / sum), the axpy in position order.
void Attention(const float* q, const PagedRows& k, const PagedRows& v, const int32_t* positions,
               int64_t n_positions, const AttentionShape& shape, float* scratch, float* out);

// In-place softmax with the same order as Attention's.
void Softmax(float* x, int64_t n);

}  // namespace tandem::kernels
