// The AVX-512 VNNI integer kernels (quant_gemm.h's Zmm policy), compiled in
// their own file with -mavx512vnni; call only where the CPU has it.
#pragma once

#include "kernels/kernel_table.h"

namespace tandem::kernels {

void MatMulRowsQVnni(const WeightMatrix& w, const QuantizedActs& x, int n_tokens, float* y, int64_t y_stride,
                     int64_t r0, int64_t r1);

}  // namespace tandem::kernels
