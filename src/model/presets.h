// Deterministic random-weight llama models (`tandem mkmodel`). The same preset
// and type always give the same bytes. Files carry full llama metadata and a
// SentencePiece-style vocab, so other GGUF llama loaders accept them too.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/gguf.h"

namespace tandem {

struct ModelPreset {
  std::string name;
  int64_t dim, n_layers, n_heads, n_kv_heads, ffn_dim, vocab_size, context_length;
};

const std::vector<ModelPreset>& ModelPresets();
StatusOr<ModelPreset> FindPreset(const std::string& name);
StatusOr<TensorType> ParseTensorType(const std::string& name);  // f32, f16, bf16, q8_0

// Matrices in `type`; norms always F32. architecture: "llama" or "qwen2"
// (qwen2 adds Q/K/V biases and uses NeoX RoPE ordering).
StatusOr<GgufWriter> BuildRandomModel(const ModelPreset& preset, TensorType type, uint64_t seed,
                                      const std::string& architecture = "llama");
Status WriteRandomModel(const ModelPreset& preset, TensorType type, uint64_t seed,
                        const std::string& path, const std::string& architecture = "llama");

// The embedded default model: the `small` preset in F32, generated on first
// use under $TANDEM_HOME (default ~/.cache/tandem) and reused afterwards.
StatusOr<std::string> EnsureDefaultModel();

// Converts fp32 values to the bytes of one tensor row of `type`.
std::vector<uint8_t> EncodeTensor(const std::vector<float>& values, TensorType type);

}  // namespace tandem
