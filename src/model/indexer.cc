#include "common/splitmix.h"
#include "model/indexer.h"

#include <cmath>

namespace tandem {
namespace {

// Uniform in [-1, 1), a pure function of the index.
double Pseudo(uint64_t i) { return double(SplitMix64(i ^ 0x1d3c5a7b) >> 11) * 0x1.0p-52 - 1.0; }

// dims x cols, row-major. Columns orthonormal (Gram-Schmidt in double) when
// cols <= dims; otherwise entries of variance 1/dims (a Johnson-Lindenstrauss
// projection, dot products preserved in expectation).
std::vector<float> Projection(int64_t dims, int64_t cols) {
  std::vector<double> m(size_t(dims * cols));
  for (size_t i = 0; i < m.size(); ++i) m[i] = Pseudo(i);
  if (cols <= dims) {
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t prev = 0; prev < c; ++prev) {
        double d = 0;
        for (int64_t r = 0; r < dims; ++r) d += m[size_t(r * cols + c)] * m[size_t(r * cols + prev)];
        for (int64_t r = 0; r < dims; ++r) m[size_t(r * cols + c)] -= d * m[size_t(r * cols + prev)];
      }
      double norm = 0;
      for (int64_t r = 0; r < dims; ++r) norm += m[size_t(r * cols + c)] * m[size_t(r * cols + c)];
      norm = std::sqrt(norm);
      for (int64_t r = 0; r < dims; ++r) m[size_t(r * cols + c)] /= norm;
    }
  } else {
    const double s = std::sqrt(3.0 / double(dims));  // uniform [-1,1) has variance 1/3
    for (auto& x : m) x *= s;
  }
  return std::vector<float>(m.begin(), m.end());
}

}  // namespace

Indexer::Indexer(const ModelConfig& c, int64_t index_dims)
    : n_heads_(int(c.n_kv_heads)),
      dims_(index_dims),
      head_dim_(c.head_dim),
      group_(c.n_heads / c.n_kv_heads),
      projection_(Projection(index_dims, c.kv_dim())),
      weights_(size_t(c.n_kv_heads), 1.0f / float(c.n_kv_heads)) {
  const size_t row_bytes = size_t(c.kv_dim()) * 4;
  const auto* base = reinterpret_cast<const uint8_t*>(projection_.data());
  key_projection_ = {kernels::WeightType::kF32, base, dims_, c.kv_dim(), row_bytes};
  for (int g = 0; g < n_heads_; ++g) {
    query_projection_.push_back({kernels::WeightType::kF32, base + size_t(g * head_dim_) * 4, dims_,
                                 head_dim_, row_bytes});
  }
}

void Indexer::GroupMeans(const float* q, float* qbar) const {
  const float inv = 1.0f / float(group_);
  for (int g = 0; g < n_heads_; ++g) {
    float* out = qbar + g * head_dim_;
    for (int64_t i = 0; i < head_dim_; ++i) {
      float sum = 0.0f;
      for (int64_t h = 0; h < group_; ++h) sum = sum + q[(g * group_ + h) * head_dim_ + i];
      out[i] = sum * inv;
    }
  }
}

}  // namespace tandem
