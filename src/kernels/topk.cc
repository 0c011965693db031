#include "kernels/topk.h"

#include <cstring>

namespace tandem::kernels {
namespace {

// An order-preserving unsigned key of a score: larger score, larger key.
// NaN maps to -inf's key and -0 to +0's, so keys are equal exactly where
// the scores compare equal under "NaN ranks lowest".
inline uint32_t ScoreKey(float s) {
  uint32_t u;
  std::memcpy(&u, &s, 4);
  if (s != s) u = 0xff800000u;   // NaN: -inf
  if (u == 0x80000000u) u = 0;   // -0: +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int kDigitBits[3] = {11, 11, 10};
constexpr int kDigitShift[3] = {21, 10, 0};

}  // namespace

// Radix select: the keys overwrite the scores; one pass histograms their top
// digit and the next copies the keys sharing the k-th largest's top digit
// into `out`; two more digits are resolved among those candidates alone. That
// gives the k-th largest key T and how many of the selected equal it; a last
// pass in position order keeps every key above T and the first such ties,
// which writes the selection already sorted. O(n), no comparison sort.
int64_t SelectTopK(float* scores, int64_t n, int64_t k, int32_t* out) {
  if (k >= n) {
    for (int64_t i = 0; i < n; ++i) out[i] = int32_t(i);
    return n;
  }
  if (k <= 0) return 0;
  auto* keys = reinterpret_cast<uint32_t*>(scores);
  uint32_t hist[1 << 11];
  std::memset(hist, 0, sizeof(uint32_t) << kDigitBits[0]);
  for (int64_t i = 0; i < n; ++i) {
    keys[i] = ScoreKey(scores[i]);
    ++hist[keys[i] >> kDigitShift[0]];
  }
  int64_t need = k;  // how many of the keys matching the prefix are still to take
  auto descend = [&need, &hist](uint32_t top) {
    uint32_t digit = top;
    for (; hist[digit] < need; --digit) need -= hist[digit];
    return digit;
  };
  uint32_t prefix = descend((1u << kDigitBits[0]) - 1) << kDigitShift[0];
  auto* candidates = reinterpret_cast<uint32_t*>(out);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    if ((keys[i] >> kDigitShift[0]) == (prefix >> kDigitShift[0])) candidates[m++] = keys[i];
  }
  uint32_t prefix_mask = ~0u << kDigitShift[0];
  for (int d = 1; d < 3; ++d) {
    const int bits = kDigitBits[d], shift = kDigitShift[d];
    const uint32_t digit_mask = (1u << bits) - 1;
    std::memset(hist, 0, sizeof(uint32_t) << bits);
    for (int64_t i = 0; i < m; ++i) {
      if ((candidates[i] & prefix_mask) == prefix) ++hist[(candidates[i] >> shift) & digit_mask];
    }
    prefix |= descend(digit_mask) << shift;
    prefix_mask |= digit_mask << shift;
  }
  // prefix is now T: take keys above it, and the first `need` equal to it.
  int64_t taken = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = keys[i];
    if (key > prefix || (key == prefix && need-- > 0)) out[taken++] = int32_t(i);
  }
  return taken;
}

}  // namespace tandem::kernels
