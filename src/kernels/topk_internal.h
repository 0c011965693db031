// Pieces shared by the top-k kernels (topk.cc, topk_avx512.cc).
#pragma once

#include <cstdint>
#include <cstring>

namespace tandem::kernels::topk {

// An order-preserving unsigned key of a score: larger score, larger key.
// NaN maps to -inf's key and -0 to +0's, so keys are equal exactly where
// the scores compare equal under "NaN ranks lowest".
inline uint32_t ScoreKey(float s) {
  uint32_t u;
  std::memcpy(&u, &s, 4);
  if (s != s) u = 0xff800000u;  // NaN: -inf
  if (u == 0x80000000u) u = 0;  // -0: +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Radix digits of a key, most significant first.
constexpr int kDigits = 3;
constexpr int kDigitBits[kDigits] = {11, 11, 10};
constexpr int kDigitShift[kDigits] = {21, 10, 0};

// The selection of the top k: every key above `key`, and the first `ties`
// (in position order) of the keys equal to it.
struct Threshold {
  uint32_t key = 0;
  int64_t ties = 0;
};

// The k-th largest of keys[0, m) (1 <= k <= m), found digit by digit from
// digit `first`: every key shares `prefix` on the digits before it.
inline Threshold RadixThreshold(const uint32_t* keys, int64_t m, int64_t k, uint32_t prefix, int first) {
  uint32_t prefix_mask = first == 0 ? 0 : ~0u << kDigitShift[first - 1];
  uint32_t hist[1 << 11];
  for (int d = first; d < kDigits; ++d) {
    const int shift = kDigitShift[d];
    const uint32_t digit_mask = (1u << kDigitBits[d]) - 1;
    std::memset(hist, 0, sizeof(uint32_t) << kDigitBits[d]);
    for (int64_t i = 0; i < m; ++i) {
      if ((keys[i] & prefix_mask) == prefix) ++hist[(keys[i] >> shift) & digit_mask];
    }
    uint32_t digit = digit_mask;  // from the top digit down until k is reached
    for (; hist[digit] < k; --digit) k -= hist[digit];
    prefix |= digit << shift;
    prefix_mask |= digit_mask << shift;
  }
  return {prefix, k};
}

}  // namespace tandem::kernels::topk
