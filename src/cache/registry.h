// THE cache-buffer registry (invariant 1): the one list of per-token buffers.
//
// Every per-token, per-layer buffer a model keeps (K, V, index-K, ...) is one
// entry here, with its dtype and bytes per token. Allocation, copies, the
// handoff, tiers, checksums and layer readiness iterate this list; nothing
// else names a particular buffer to move or check it. Kernels obtain views of
// a buffer by its id.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace tandem {

enum class CacheDType : uint8_t {
  kF32 = 0,
  kBF16 = 1,
  kFp8E4M3Scaled = 2,  // per token: `dims` e4m3 bytes; per page: one fp32 scale per token after them
  kF16 = 3,
};

const char* CacheDTypeName(CacheDType dtype);

struct CacheBufferSpec {
  std::string name;  // e.g. "k", "v", "index_k"
  CacheDType dtype = CacheDType::kF32;
  int64_t dims = 0;  // elements per token per layer
  // Bytes one token occupies in a page (data plus any per-token scale).
  int64_t BytesPerToken() const;
};

using CacheBufferId = int32_t;

class CacheBufferRegistry {
 public:
  // Adds a buffer; names are unique. Returns its id (dense, from 0).
  StatusOr<CacheBufferId> Register(CacheBufferSpec spec);

  int32_t size() const { return int32_t(buffers_.size()); }
  const CacheBufferSpec& spec(CacheBufferId id) const { return buffers_.at(size_t(id)); }
  const std::vector<CacheBufferSpec>& buffers() const { return buffers_; }
  StatusOr<CacheBufferId> Find(const std::string& name) const;

 private:
  std::vector<CacheBufferSpec> buffers_;
};

}  // namespace tandem
