// qwen3 (GGUF architecture `qwen3`): the llama family's layer with NeoX RoPE,
// no biases, a head size of its own (attention.key_length, 128 in the
// released models, not dim / heads), and one RMS norm per attention head of
// the queries and of the keys before RoPE (attn_q_norm, attn_k_norm:
// head_dim weights each, shared by every head).
#pragma once

#include "model/arch/architecture.h"

namespace tandem {

const Architecture& Qwen3Architecture();

}  // namespace tandem
