#include "kernels/quant_gemm_vnni.h"

#include "kernels/quant_gemm.h"

namespace tandem::kernels {

// Eight tokens per tile: 8 accumulators, 8 block integers and 8 code vectors
// fit the 32 vector registers.
void MatMulRowsQVnni(const WeightMatrix& w, const QuantizedActs& x, int n_tokens, float* y, int64_t y_stride,
                     int64_t r0, int64_t r1) {
  qgemm::MatMulRowsQ<qgemm::Zmm, 8>(w, x, n_tokens, y, y_stride, r0, r1);
}

}  // namespace tandem::kernels
