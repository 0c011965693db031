#include "kernels/topk.h"

#include <cstring>

#include "kernels/cpu.h"
#include "kernels/topk_internal.h"

namespace tandem::kernels {

// Radix select: the keys overwrite the scores; one pass histograms their top
// digit and the next copies the keys sharing the k-th largest's top digit
// into `out`; the other digits are resolved among those candidates alone.
// That gives the k-th largest key T and how many of the selected equal it; a
// last pass in position order keeps every key above T and the first such
// ties, which writes the selection already sorted. O(n), no comparison sort.
int64_t SelectTopKRadix(float* scores, int64_t n, int64_t k, int32_t* out) {
  if (k >= n) {
    for (int64_t i = 0; i < n; ++i) out[i] = int32_t(i);
    return n;
  }
  if (k <= 0) return 0;
  using topk::kDigitShift;
  auto* keys = reinterpret_cast<uint32_t*>(scores);
  uint32_t hist[1 << 11] = {};
  for (int64_t i = 0; i < n; ++i) {
    keys[i] = topk::ScoreKey(scores[i]);
    ++hist[keys[i] >> kDigitShift[0]];
  }
  uint32_t top = (1u << topk::kDigitBits[0]) - 1;
  for (; hist[top] < k; --top) k -= hist[top];
  auto* candidates = reinterpret_cast<uint32_t*>(out);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    if ((keys[i] >> kDigitShift[0]) == top) candidates[m++] = keys[i];
  }
  const topk::Threshold t = topk::RadixThreshold(candidates, m, k, top << kDigitShift[0], 1);
  int64_t taken = 0, ties = t.ties;
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t key = keys[i];
    if (key > t.key || (key == t.key && ties-- > 0)) out[taken++] = int32_t(i);
  }
  return taken;
}

int64_t SelectTopK(float* scores, int64_t n, int64_t k, int32_t* out) {
  return Active().select_topk(scores, n, k, out);
}

}  // namespace tandem::kernels
