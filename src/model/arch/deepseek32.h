// deepseek32 (GGUF architecture `deepseek32`, llama.cpp's names): DeepSeek's
// sparse-attention models. MLA attention over a compressed latent (the
// `kv_latent` cache buffer: kv_lora_rank + RoPE dims a token), the lightning
// indexer whose per-token key is the `index_k` buffer and which picks each
// query's top-k positions, and a mixture of experts after the leading dense
// layers. Its hyper-parameters: deepseek32_config.h; its layer:
// deepseek32_layer.cc.
#pragma once

#include <memory>
#include <vector>

#include "model/arch/architecture.h"

namespace tandem {

// One layer's tensors. 3-D tensors (per head, per expert) are one matrix
// view per slice. Dense layers (the first leading_dense) have
// w_gate/w_up/w_down; the others the router, the routed experts and the
// shared experts.
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

struct DsaWeights : ArchWeights {
  std::vector<DsaLayerWeights> layers;
};

const Architecture& Deepseek32Architecture();

// The layer computation (deepseek32_layer.cc), for Deepseek32Architecture.
std::unique_ptr<ArchLayers> MakeDeepseek32Layers(const ModelConfig& config);

}  // namespace tandem
