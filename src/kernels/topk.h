// Top-k selection for sparse attention.
#pragma once

#include <cstdint>

namespace tandem::kernels {

// Writes to `out` the positions of the k highest scores among [0, n), in
// ascending position order; returns min(k, n). Ties go to the lower position
// and NaN ranks lowest, so the selected set is unique. out holds n entries;
// both arrays are also the work space: the scores are overwritten.
// Runs the active ISA's kernel; every kernel selects the same set.
int64_t SelectTopK(float* scores, int64_t n, int64_t k, int32_t* out);

// The portable kernel (scalar and AVX2 tables): a radix select.
int64_t SelectTopKRadix(float* scores, int64_t n, int64_t k, int32_t* out);

}  // namespace tandem::kernels
