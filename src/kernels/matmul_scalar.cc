// Scalar kernels: the reference implementation of the canonical order.
#include <cmath>

#include "kernels/weight_row.h"

namespace tandem::kernels {
namespace {

float RowDot(WeightType type, const uint8_t* row, const float* x, int64_t n) {
  float acc[kLanes] = {};
  float w[kLanes], xv[kLanes];
  for (int64_t k0 = 0; k0 < n; k0 += kLanes) {
    LoadTail(type, row, x, k0, n, w, xv);
    for (int j = 0; j < kLanes; ++j) acc[j] = std::fma(w[j], xv[j], acc[j]);
  }
  return ReduceLanes(acc);
}

void MatMulRows(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
                int64_t y_stride, int64_t r0, int64_t r1) {
  for (int t = 0; t < n_tokens; ++t) {
    for (int64_t r = r0; r < r1; ++r) {
      y[t * y_stride + r] = RowDot(w.type, w.data + r * w.row_bytes, x + t * x_stride, w.cols);
    }
  }
}

float Dot(const float* a, const float* b, int64_t n) {
  return RowDot(WeightType::kF32, reinterpret_cast<const uint8_t*>(a), b, n);
}

void Axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

}  // namespace

const KernelTable& ScalarTable() {
  static const KernelTable table{&MatMulRows, &Dot, &Axpy};
  return table;
}

}  // namespace tandem::kernels
