#include "kernels/ops.h"

#include <cmath>
#include <cstring>

#include "common/half.h"
#include "kernels/cpu.h"

namespace tandem::kernels {

float ExpDeterministic(float x) {
  if (x != x) return x;
  if (x < -87.3f) return 0.0f;
  if (x > 88.7f) return BitsToFloat(0x7f800000u);
  // x = n ln2 + r, |r| <= ln2/2; ln2 split in two parts so r is nearly exact.
  const float n = std::nearbyint(x * 1.44269504f);
  float r = std::fma(-n, 0.693145752f, x);
  r = std::fma(-n, 1.42860677e-06f, r);
  // Taylor series of e^r to degree 7, Horner form.
  float p = 1.98412698e-04f;
  p = std::fma(p, r, 1.38888889e-03f);
  p = std::fma(p, r, 8.33333333e-03f);
  p = std::fma(p, r, 4.16666667e-02f);
  p = std::fma(p, r, 1.66666667e-01f);
  p = std::fma(p, r, 0.5f);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  const int e = int(n);
  // 2^e may be subnormal for e < -126: scale in two steps to stay exact.
  if (e < -126) return p * BitsToFloat(uint32_t(e + 126 + 127) << 23) * BitsToFloat(1u << 23);
  return p * BitsToFloat(uint32_t(e + 127) << 23);
}

void RmsNorm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  const float ss = Active().dot(x, x, n);
  const float scale = 1.0f / std::sqrt(ss / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * weight[i];
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + ExpDeterministic(-g)) * up[i];
  }
}

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

void Attention(const float* q, const PagedRows& k, const PagedRows& v, const int32_t* positions,
               int64_t n_positions, const AttentionShape& shape, float* scratch, float* out) {
  const KernelTable& kt = Active();
  const int group = shape.n_heads / shape.n_kv_heads;
  const int hd = shape.head_dim;
  const int head_end = shape.head_end < 0 ? shape.n_heads : shape.head_end;
  for (int h = shape.head_begin; h < head_end; ++h) {
    const float* qh = q + int64_t(h) * hd;
    const int64_t kv_off = int64_t(h / group) * hd;
    float mx = -BitsToFloat(0x7f800000u);
    for (int64_t i = 0; i < n_positions; ++i) {
      const int64_t pos = positions ? positions[i] : i;
      const float s = kt.dot(qh, k.Row(pos) + kv_off, hd) * shape.scale;
      scratch[i] = s;
      mx = s > mx ? s : mx;
    }
    float* oh = out + int64_t(h) * hd;
    std::memset(oh, 0, sizeof(float) * hd);
    float sum = 0.0f;
    for (int64_t i = 0; i < n_positions; ++i) {
      const int64_t pos = positions ? positions[i] : i;
      const float p = ExpDeterministic(scratch[i] - mx);
      sum = sum + p;
      kt.axpy(p, v.Row(pos) + kv_off, oh, hd);
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < hd; ++i) oh[i] = oh[i] * inv;
  }
}

}  // namespace tandem::kernels
