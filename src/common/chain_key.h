// The names of cache pages across engines: page i of a token sequence holds
// tokens [P i, P i + P) (P = the page's tokens) and is named by
//   key_i = XXH3_64(tokens of page i, seed = key_{i-1}),  key_{-1} = kChainRootSeed
// so one key names a whole prefix. The prefix index (prefix/prefix_index.h),
// the tiers, KV events and every placement use these keys.
//
// A tenant's chains start from its own root (invariant 10): CacheRoot(salt),
// where the salt names the tenant (server/access.h, CacheSaltFor: an API
// key's, or a request's cache_salt). Salt 0 (no tenants: a server without
// keys) is kChainRootSeed itself. Chains of different salts share no key,
// so no cache, tier or KV event answers one tenant with another's pages.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

// A page's tokens: cache/layout.h's kPageTokens (checked there), for the
// layers that place requests without knowing the cache layout.
inline constexpr size_t kChainPageTokens = 64;
inline constexpr uint64_t kChainRootSeed = 0x74616e64656d7078ull;  // "tandempx"

uint64_t ChainKey(uint64_t parent_key, std::span<const int32_t> page_tokens);
// The key before a tenant's first page.
uint64_t CacheRoot(uint64_t salt);
// The keys of every whole page of `tokens`, first page first, from `root`.
std::vector<uint64_t> ChainKeys(std::span<const int32_t> tokens, size_t page_tokens,
                                uint64_t root = kChainRootSeed);

}  // namespace tandem
