#include "model/cache_spec.h"

#include "model/arch/architecture.h"

namespace tandem {

Status AttentionOptions::Validate() const {
  if (top_k < 1) return InvalidArgument("top-k must be at least 1");
  if (index_dims < 16 || index_dims > 1024) return InvalidArgument("index dims must be in [16, 1024]");
  if (index_k_dtype != CacheDType::kFp8E4M3Scaled && index_k_dtype != CacheDType::kBF16) {
    return InvalidArgument("index-K dtype must be fp8 or bf16");
  }
  if (kv_dtype != CacheDType::kF32 && kv_dtype != CacheDType::kF16 && kv_dtype != CacheDType::kBF16) {
    return InvalidArgument("K/V dtype must be f32, f16 or bf16");
  }
  return Status::Ok();
}

StatusOr<AttentionKind> ParseAttentionKind(const std::string& name) {
  if (name == "dense") return AttentionKind::kDense;
  if (name == "sparse") return AttentionKind::kSparse;
  return InvalidArgument("attention must be dense or sparse, not '" + name + "'");
}

StatusOr<CacheDType> ParseIndexKDType(const std::string& name) {
  if (name == "fp8") return CacheDType::kFp8E4M3Scaled;
  if (name == "bf16") return CacheDType::kBF16;
  return InvalidArgument("index-K dtype must be fp8 or bf16, not '" + name + "'");
}

StatusOr<CacheDType> ParseKvDType(const std::string& name) {
  if (name == "f32") return CacheDType::kF32;
  if (name == "f16") return CacheDType::kF16;
  if (name == "bf16") return CacheDType::kBF16;
  return InvalidArgument("K/V dtype must be f32, f16 or bf16, not '" + name + "'");
}

StatusOr<AttentionOptions> ParseAttentionOptions(const std::string& kind, const std::string& index_k_dtype,
                                                 int64_t top_k, const std::string& kv_dtype) {
  AttentionOptions a;
  TANDEM_ASSIGN_OR_RETURN(a.kv_dtype, ParseKvDType(kv_dtype));
  TANDEM_ASSIGN_OR_RETURN(a.kind, ParseAttentionKind(kind));
  TANDEM_ASSIGN_OR_RETURN(a.index_k_dtype, ParseIndexKDType(index_k_dtype));
  a.top_k = top_k;
  TANDEM_RETURN_IF_ERROR(a.Validate());
  return a;
}

StatusOr<CacheSpec> MakeCacheSpec(const ModelConfig& config, const AttentionOptions& attention) {
  TANDEM_RETURN_IF_ERROR(attention.Validate());
  CacheSpec spec;
  spec.attention = attention;
  TANDEM_RETURN_IF_ERROR(config.arch().RegisterCache(config, &spec));
  return spec;
}

int64_t CacheSpec::AttendedBytesPerToken() const {
  int64_t bytes = 0;
  for (CacheBufferId b = 0; b < registry.size(); ++b) {
    if (b != index_k) bytes += registry.spec(b).BytesPerToken();
  }
  return bytes;
}

std::string AttentionFingerprint(const AttentionOptions& attention) {
  if (attention.kind == AttentionKind::kDense) return "attention=dense";
  return "attention=sparse:top_k=" + std::to_string(attention.top_k);
}

}  // namespace tandem
