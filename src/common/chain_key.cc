#include "common/chain_key.h"

#include <xxhash.h>

namespace tandem {

uint64_t ChainKey(uint64_t parent_key, std::span<const int32_t> page_tokens) {
  return XXH3_64bits_withSeed(page_tokens.data(), page_tokens.size_bytes(), parent_key);
}

uint64_t CacheRoot(uint64_t salt) {
  if (salt == 0) return kChainRootSeed;
  return XXH3_64bits_withSeed(&salt, sizeof salt, kChainRootSeed ^ 0x73616c74ull);  // "salt"
}

std::vector<uint64_t> ChainKeys(std::span<const int32_t> tokens, size_t page_tokens, uint64_t root) {
  std::vector<uint64_t> keys;
  if (page_tokens == 0) return keys;
  keys.reserve(tokens.size() / page_tokens);
  uint64_t key = root;
  for (size_t at = 0; at + page_tokens <= tokens.size(); at += page_tokens) {
    key = ChainKey(key, tokens.subspan(at, page_tokens));
    keys.push_back(key);
  }
  return keys;
}

}  // namespace tandem
