// Scalar kernels: the reference implementation of the canonical order.
#include <cmath>

#include "kernels/attention_impl.h"
#include "kernels/indexer_impl.h"
#include "kernels/topk.h"
#include "common/fp8.h"
#include "kernels/exp_inline.h"
#include "kernels/quant_dot.h"
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

void QuantizeActs(const float* x, int64_t x_stride, int n_tokens, int64_t cols, int block, int8_t* q, float* d,
                  int16_t* sums) {
  for (int t = 0; t < n_tokens; ++t) {
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
      const int64_t at = t * cols + b0;
      QuantizeActBlock(x + t * x_stride + b0, block, q + at, d + at / block, sums + at / 16);
    }
  }
}

void MatMulRowsQ(const WeightMatrix& w, const QuantizedActs& x, int n_tokens, float* y, int64_t y_stride,
                 int64_t r0, int64_t r1) {
  const int64_t nb = x.cols / x.block;
  for (int t = 0; t < n_tokens; ++t) {
    for (int64_t r = r0; r < r1; ++r) {
      y[t * y_stride + r] = QuantRowDot(w.type, w.data + r * w.row_bytes, w.cols, x.q + t * x.cols, x.d + t * nb,
                                        x.sums + t * (x.cols / 16));
    }
  }
}

void MatMulRows(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
                int64_t y_stride, int64_t r0, int64_t r1) {
  if (UsesIntegerDot(w.type)) return MatMulRowsViaActs(ScalarTable(), w, x, x_stride, n_tokens, y, y_stride, r0, r1);
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
  static const KernelTable table{&MatMulRows, &QuantizeActs, &MatMulRowsQ, &Dot, &Axpy, &SiluMul, &IndexerScores, &SelectTopKRadix, &Attention};
  return table;
}

}  // namespace tandem::kernels
