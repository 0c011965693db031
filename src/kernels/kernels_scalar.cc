// Scalar kernels: the reference implementation of the canonical order.
#include <cmath>

#include "kernels/attention_impl.h"
#include "kernels/indexer_impl.h"
#include "kernels/topk.h"
#include "common/fp8.h"
#include "kernels/exp_inline.h"
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

struct ScalarOps {
  static void DecodeFp8(const uint8_t* q, int64_t n, float* out) {
    const float* table = Fp8E4M3Table();
    for (int64_t i = 0; i < n; ++i) out[i] = table[q[i]];
  }
  static float Dot(const float* a, const float* b, int64_t n) { return tandem::kernels::Dot(a, b, n); }
  static void Axpy(float a, const float* x, float* y, int64_t n) { tandem::kernels::Axpy(a, x, y, n); }
  static void ExpMinus(float* x, int64_t n, float m) {
    for (int64_t i = 0; i < n; ++i) x[i] = ExpInline(x[i] - m);
  }
};

void IndexerScores(const IndexerQueries& queries, const PagedRows& keys, bool fp8, int64_t begin,
                   int64_t end, float* scores, int64_t scores_stride, float* scratch) {
  IndexerScoresImpl<ScalarOps>(queries, keys, fp8, begin, end, scores, scores_stride, scratch);
}

void Attention(const AttentionQueries& queries, const PagedRows& k, const PagedRows& v,
               const int32_t* positions, const AttentionShape& shape, float* scratch) {
  AttentionImpl<ScalarOps>(queries, k, v, positions, shape, scratch);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = SiluMulInline(gate[i], up[i]);
}

}  // namespace

const KernelTable& ScalarTable() {
  static const KernelTable table{&MatMulRows, &Dot, &Axpy, &SiluMul, &IndexerScores, &SelectTopKRadix, &Attention};
  return table;
}

}  // namespace tandem::kernels
