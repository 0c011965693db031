// Views of a model's tensors inside the mapped GGUF file, with every shape
// checked against the config. Matrices stay in the file's type (F32, F16,
// BF16, Q8_0) and are read in place; norms and biases are converted to fp32.
#pragma once

#include <vector>

#include "common/status.h"
#include "kernels/kernel_table.h"
#include "model/config.h"
#include "model/gguf.h"

namespace tandem {

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> q_bias, k_bias, v_bias;  // empty when absent (qwen2 has them)
  kernels::WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

struct ModelWeights {
  kernels::WeightMatrix token_embd;  // rows = vocab, cols = dim
  kernels::WeightMatrix output;      // rows = vocab, cols = dim (== token_embd when tied)
  std::vector<float> output_norm;
  std::vector<LayerWeights> layers;
  bool tied_output = false;
  int64_t matrix_bytes = 0;  // bytes of all matrices read per decoded token
};

StatusOr<ModelWeights> LoadWeights(const GgufFile& gguf, const ModelConfig& config);

}  // namespace tandem
