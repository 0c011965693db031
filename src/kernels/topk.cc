#include "kernels/topk.h"

#include <algorithm>

namespace tandem::kernels {

int64_t SelectTopK(const float* scores, int64_t n, int64_t k, int32_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = int32_t(i);
  if (k >= n) return n;
  auto key = [scores](int32_t i) {
    const float s = scores[i];
    return s != s ? -__builtin_huge_valf() : s;
  };
  auto better = [&](int32_t a, int32_t b) {
    const float sa = key(a), sb = key(b);
    return sa != sb ? sa > sb : a < b;
  };
  std::nth_element(out, out + k, out + n, better);
  std::sort(out, out + k);
  return k;
}

}  // namespace tandem::kernels
