// Row quantizers for the block types of kernels/quant_blocks.h: simple
// round-to-nearest with per-block scales (not llama.cpp's error-minimizing
// search), for generated test and benchmark models. Files quantized
// elsewhere (llama-quantize) are read the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "model/gguf.h"

namespace tandem {

// Appends the encoding of n values to out; non-finite values are stored as 0.
// REQUIRES: n a multiple of the type's block; type one of Q4_0, Q5_0, Q4_K, Q5_K, Q6_K.
void QuantizeBlocks(TensorType type, const float* x, int64_t n, std::vector<uint8_t>& out);

}  // namespace tandem
