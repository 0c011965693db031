// Views of a model's tensors inside the mapped GGUF file, with every shape
// checked against the config: the embedding, output and final norm here,
// the layers' by the architecture (model/arch/). Float matrices are read in place; block-
// quantized ones are also repacked for the integer kernels
// (kernels/quant_pack.h, WeightMatrix::packed); norms and biases are
// converted to fp32.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/kernel_table.h"
#include "kernels/quant_pack.h"
#include "model/arch/architecture.h"
#include "model/config.h"
#include "model/gguf.h"

namespace tandem {

struct ModelWeights {
  kernels::WeightMatrix token_embd;  // rows = vocab, cols = dim
  kernels::WeightMatrix output;      // rows = vocab, cols = dim (== token_embd when tied)
  std::vector<float> output_norm;
  std::unique_ptr<ArchWeights> layers;  // the architecture's own (model/arch/)
  kernels::WeightType ffn_type = kernels::WeightType::kF32;  // the feed-forward matrices' type
  bool tied_output = false;
  // The repacked block-quantized matrices (kernels/quant_pack.h) the
  // WeightMatrix::packed pointers above point into.
  std::vector<std::shared_ptr<const kernels::PackedWeights>> packed;
  // Bytes of the matrices read per decoded token (routed experts: the used
  // share; the architecture's LoadLayers subtracts what a token leaves unread).
  int64_t matrix_bytes = 0;
};

StatusOr<ModelWeights> LoadWeights(const GgufFile& gguf, const ModelConfig& config, bool pack = true);

}  // namespace tandem
