// Which per-token cache buffers an engine keeps, derived from the model's
// architecture (model/arch/) and the attention options. Llama family: K and
// V always; the sparse-attention index-K buffer when attention is sparse.
// deepseek32: the MLA latent (`kv_latent`, kv_lora_rank + RoPE dims) and the
// lightning indexer's key (`index_k`, the model's index dims), nothing else.
// The registry built here is the only list of them.
#pragma once

#include "cache/registry.h"
#include "model/config.h"

namespace tandem {

enum class AttentionKind { kDense, kSparse };

struct AttentionOptions {
  AttentionKind kind = AttentionKind::kDense;
  int64_t top_k = 2048;  // positions each query attends to under sparse attention
  CacheDType index_k_dtype = CacheDType::kFp8E4M3Scaled;  // or kBF16
  int64_t index_dims = 128;
  CacheDType kv_dtype = CacheDType::kF16;  // K and V rows: f16 (default), bf16 or f32

  Status Validate() const;
};

StatusOr<AttentionKind> ParseAttentionKind(const std::string& name);  // dense | sparse
StatusOr<CacheDType> ParseIndexKDType(const std::string& name);       // fp8 | bf16
StatusOr<CacheDType> ParseKvDType(const std::string& name);           // f32 | f16 | bf16
// The command-line spelling of the attention options, validated.
StatusOr<AttentionOptions> ParseAttentionOptions(const std::string& kind, const std::string& index_k_dtype,
                                                 int64_t top_k, const std::string& kv_dtype);

struct CacheSpec {
  AttentionOptions attention;
  CacheBufferRegistry registry;
  CacheBufferId k = -1, v = -1;  // llama family
  CacheBufferId kv_latent = -1;  // deepseek32
  CacheBufferId index_k = -1;    // -1 unless attention is sparse or the model is deepseek32

  // Bytes a token keeps in the buffers attention reads whole (all but index-K), one layer.
  int64_t AttendedBytesPerToken() const;
};

StatusOr<CacheSpec> MakeCacheSpec(const ModelConfig& config, const AttentionOptions& attention = {});

// How attention chooses positions ("attention=dense", "attention=sparse:top_k=64"):
// every cache row of a later layer depends on it, so engines that exchange
// or keep rows must agree on it as on the layout (the handshake's layout
// fingerprint and the tiers' identity carry it after the layout's parts).
std::string AttentionFingerprint(const AttentionOptions& attention);

}  // namespace tandem
