// Views of a model's tensors inside the mapped GGUF file, with every shape
// checked against the config. Float matrices are read in place; block-
// quantized ones are also repacked for the integer kernels
// (kernels/quant_pack.h, WeightMatrix::packed); norms and biases are
// converted to fp32.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/kernel_table.h"
#include "kernels/quant_pack.h"
#include "model/config.h"
#include "model/gguf.h"

namespace tandem {

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> q_bias, k_bias, v_bias;  // empty when absent (qwen2 has them)
  kernels::WeightMatrix wq, wk, wv, wo, w_gate, w_up, w_down;
};

// A deepseek32 layer (model/dsa_config.h). 3-D tensors (per head, per
// expert) are one matrix view per slice. Dense layers (the first
// leading_dense) have w_gate/w_up/w_down; the others the router, the
// routed experts and the shared experts.
struct DsaLayerWeights {
  std::vector<float> attn_norm, ffn_norm, q_a_norm, kv_a_norm;
  std::vector<float> index_k_norm, index_k_norm_bias;  // the indexer key's LayerNorm
  std::vector<float> expert_bias;                      // exp_probs_b: routing-score correction; may be empty
  kernels::WeightMatrix wq_a;    // dim -> q_lora_rank
  kernels::WeightMatrix wq_b;    // q_lora_rank -> n_heads x (nope + rope)
  kernels::WeightMatrix wkv_a;   // dim -> kv_lora_rank + rope
  std::vector<kernels::WeightMatrix> wk_b;  // per head: kv_lora_rank rows of nope (q_nope -> latent)
  std::vector<kernels::WeightMatrix> wv_b;  // per head: v_head rows of kv_lora_rank (latent -> value)
  kernels::WeightMatrix wo;      // n_heads x v_head -> dim
  kernels::WeightMatrix index_q_b, index_k, index_proj;  // q_lora -> heads x dim; dim -> dim; dim -> heads
  kernels::WeightMatrix w_gate, w_up, w_down;            // dense layers
  kernels::WeightMatrix router;                          // dim -> n_experts (ffn_gate_inp)
  std::vector<kernels::WeightMatrix> gate_exps, up_exps, down_exps;
  kernels::WeightMatrix gate_shexp, up_shexp, down_shexp;
};

struct ModelWeights {
  kernels::WeightMatrix token_embd;  // rows = vocab, cols = dim
  kernels::WeightMatrix output;      // rows = vocab, cols = dim (== token_embd when tied)
  std::vector<float> output_norm;
  std::vector<LayerWeights> layers;        // llama family
  std::vector<DsaLayerWeights> dsa_layers;  // deepseek32
  bool tied_output = false;
  // The repacked block-quantized matrices (kernels/quant_pack.h) the
  // WeightMatrix::packed pointers above point into.
  std::vector<std::shared_ptr<const kernels::PackedWeights>> packed;
  int64_t matrix_bytes = 0;  // bytes of the matrices read per decoded token (routed experts: the used share)
};

StatusOr<ModelWeights> LoadWeights(const GgufFile& gguf, const ModelConfig& config, bool pack = true);

}  // namespace tandem
