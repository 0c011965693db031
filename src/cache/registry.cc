#include "cache/registry.h"

namespace tandem {

const char* CacheDTypeName(CacheDType dtype) {
  switch (dtype) {
    case CacheDType::kF32: return "f32";
    case CacheDType::kBF16: return "bf16";
    case CacheDType::kF16: return "f16";
    case CacheDType::kFp8E4M3Scaled: return "fp8_e4m3+f32scale";
  }
  return "?";
}

int64_t CacheBufferSpec::BytesPerToken() const {
  switch (dtype) {
    case CacheDType::kF32: return dims * 4;
    case CacheDType::kBF16: return dims * 2;
    case CacheDType::kF16: return dims * 2;
    case CacheDType::kFp8E4M3Scaled: return dims + 4;
  }
  return 0;
}

StatusOr<CacheBufferId> CacheBufferRegistry::Register(CacheBufferSpec spec) {
  if (spec.name.empty() || spec.dims <= 0) {
    return InvalidArgument("cache buffer needs a name and a positive dims");
  }
  for (const auto& b : buffers_) {
    if (b.name == spec.name) return InvalidArgument("cache buffer '" + spec.name + "' registered twice");
  }
  buffers_.push_back(std::move(spec));
  return CacheBufferId(buffers_.size() - 1);
}

StatusOr<CacheBufferId> CacheBufferRegistry::Find(const std::string& name) const {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].name == name) return CacheBufferId(i);
  }
  return NotFound("no cache buffer named '" + name + "'");
}

}  // namespace tandem
