// SplitMix64: the one integer mixer behind every counter-based pseudo-random
// value in tandem (sampling draws, generated weights, derived indexer
// projections). Pure, so a value depends only on its inputs.
#pragma once

#include <cstdint>

namespace tandem {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace tandem
