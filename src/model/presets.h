// Deterministic random-weight models (`tandem mkmodel`): llama-family presets,
// and deepseek32 ones (`dsa-tiny`, `dsa-small`: MLA, the lightning indexer,
// experts). The same preset and type always give the same bytes. Files carry
// full metadata under llama.cpp's names and a SentencePiece-style vocab, so
// other GGUF loaders accept them too.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/gguf.h"

namespace tandem {

// A deepseek32 preset's MLA, indexer and expert shape (model/arch/deepseek32_config.h).
struct DsaShape {
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;
  int64_t index_heads = 0, index_dim = 0, index_top_k = 0;
  int64_t leading_dense = 0, n_experts = 0, n_experts_used = 0, n_shared_experts = 0, expert_ffn_dim = 0;
  int64_t n_expert_groups = 1, n_expert_groups_used = 1;
};

struct ModelPreset {
  std::string name;
  // n_kv_heads is 1 for deepseek32 (one shared latent); ffn_dim is its leading dense layers' width.
  int64_t dim, n_layers, n_heads, n_kv_heads, ffn_dim, vocab_size, context_length;
  DsaShape dsa = {};  // kv_lora_rank > 0: a deepseek32 preset

  // What BuildRandomModel writes it as by default: deepseek32 with an MLA shape, else llama.
  std::string architecture() const { return dsa.kv_lora_rank > 0 ? "deepseek32" : "llama"; }
};

const std::vector<ModelPreset>& ModelPresets();
StatusOr<ModelPreset> FindPreset(const std::string& name);
// f32, f16, bf16, q8_0, q4_0, q5_0, q4_k, q5_k, q6_k
StatusOr<TensorType> ParseTensorType(const std::string& name);

// How a generated model's matrices are stored: one type, or a llama.cpp
// Q4_K_M-style mix (`q4_k_m`: Q4_K, with Q6_K for output, attn_v and
// ffn_down). A matrix whose rows are not a whole number of the type's blocks
// is stored Q8_0 instead (F16 if not even 32-element blocks fit).
struct MatrixTypes {
  TensorType main = TensorType::kF32;
  TensorType sensitive = TensorType::kF32;
};
StatusOr<MatrixTypes> ParseMatrixTypes(const std::string& name);

// The chat template generated models carry: the Llama-2 shape, written so
// that it renders exactly as RenderChat(kLlama2) does (system text joins the
// next user turn inside <<SYS>>, tool results are user turns, contents are
// trimmed, every user turn opens with BOS).
inline constexpr const char* kPresetChatTemplate =
    "{%- set ns = namespace(system='') -%}\n"
    "{%- for m in messages -%}\n"
    "{%- if m['role'] == 'system' -%}\n"
    "{%- if ns.system -%}{%- set ns.system = ns.system + '\\n' -%}{%- endif -%}\n"
    "{%- set ns.system = ns.system + (m['content'] | trim) -%}\n"
    "{%- elif m['role'] == 'assistant' -%}\n"
    "{{- ' ' + (m['content'] | trim) + ' ' + eos_token -}}\n"
    "{%- else -%}\n"
    "{{- bos_token + '[INST] ' -}}\n"
    "{%- if ns.system -%}{{- '<<SYS>>\\n' + ns.system + '\\n<</SYS>>\\n\\n' -}}{%- set ns.system = '' -%}{%- endif -%}\n"
    "{{- (m['content'] | trim) + ' [/INST]' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if ns.system -%}{{- bos_token + '[INST] <<SYS>>\\n' + ns.system + '\\n<</SYS>>\\n\\n [/INST]' -}}{%- endif -%}\n";

// Matrices in `type`; norms always F32. architecture: "llama", "qwen2"
// (adds Q/K/V biases and uses NeoX RoPE ordering) or "qwen3" (NeoX RoPE,
// per-head Q and K norms); a deepseek32 preset is always deepseek32
// ("llama", the default, is taken to mean that).
StatusOr<GgufWriter> BuildRandomModel(const ModelPreset& preset, MatrixTypes types, uint64_t seed,
                                      const std::string& architecture = "llama");
inline StatusOr<GgufWriter> BuildRandomModel(const ModelPreset& preset, TensorType type, uint64_t seed,
                                             const std::string& architecture = "llama") {
  return BuildRandomModel(preset, MatrixTypes{type, type}, seed, architecture);
}
Status WriteRandomModel(const ModelPreset& preset, MatrixTypes types, uint64_t seed,
                        const std::string& path, const std::string& architecture = "llama");

// The embedded default model: the `small` preset in F32, generated on first
// use under $TANDEM_HOME (default ~/.cache/tandem) and reused afterwards.
StatusOr<std::string> EnsureDefaultModel();

// Converts fp32 values to the bytes of one tensor row of `type`.
std::vector<uint8_t> EncodeTensor(const std::vector<float>& values, TensorType type);

}  // namespace tandem
