#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/half.h"
#include "kernels/cpu.h"
#include "kernels/exp_inline.h"

namespace tandem::kernels {

float ExpDeterministic(float x) { return ExpInline(x); }

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float ss = Active().dot(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * weight[i];
}

void SiluMul(float* gate, const float* up, int64_t n) { Active().silu_mul(gate, up, n); }

void Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

void Rope(float* x, int n_heads, int head_dim, int rot_dims, const float* cos, const float* sin,
          bool neox) {
  const int half = rot_dims / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = neox ? i : 2 * i;
      const int b = neox ? i + half : 2 * i + 1;
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * cos[i] - x1 * sin[i];
      v[b] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

void Softmax(float* x, int64_t n) {
  float mx = -BitsToFloat(0x7f800000u);
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = ExpDeterministic(x[i] - mx);
    sum = sum + x[i];
  }
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / sum;
}

void Attention(const AttentionQueries& queries, const PagedRows& k, const PagedRows& v,
               const int32_t* positions, const AttentionShape& shape, float* scratch) {
  Active().attention(queries, k, v, positions, shape, scratch);
}

int64_t AttentionScratchFloats(int n_queries, const AttentionShape& shape) {
  const int64_t hd = shape.head_dim;
  // Tiled kernels: per row o, l lanes and m (n_queries rows per head of a KV
  // head, or one query's rows for every head). Row-at-a-time kernels: scores,
  // o and one converted K and V row. Plus alignment slack.
  const int64_t rows = std::max<int64_t>(int64_t(n_queries) * (shape.n_heads / shape.n_kv_heads), shape.n_heads);
  return rows * (hd + kLanes + 1) + 4 * kAttentionBlock + kAttentionBlock + 3 * hd + 64;
}

}  // namespace tandem::kernels
