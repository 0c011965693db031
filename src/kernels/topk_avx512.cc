// Top-k selection on AVX-512: the same set as SelectTopKRadix (topk.cc), with
// the passes over all n keys vectorized. A sample of the keys gives a bound G
// that about k keys reach; one vector pass counts the keys >= G and, when
// there are at least k, another compresses them into a short candidate list
// where the radix passes run. The last pass writes the selected positions in
// order with compress instructions.
#include <algorithm>
#include <functional>

#include "kernels/avx512_inline.h"
#include "kernels/topk_internal.h"

namespace tandem::kernels::avx512 {
namespace {

// topk::ScoreKey, 16 lanes at a time.
inline __m512i Keys16(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  u = _mm512_mask_mov_epi32(u, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_set1_epi32(int(0xff800000u)));
  u = _mm512_mask_mov_epi32(u, _mm512_cmpeq_epi32_mask(u, _mm512_set1_epi32(int(0x80000000u))),
                            _mm512_setzero_si512());
  const __m512i flip = _mm512_or_si512(_mm512_srai_epi32(u, 31), _mm512_set1_epi32(int(0x80000000u)));
  return _mm512_xor_si512(u, flip);
}

inline __mmask16 Live(int64_t i, int64_t n) {
  return n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
}

// Writes the lanes of v selected by `mask`, packed, at dst.
inline int64_t Pack(int32_t* dst, __mmask16 mask, __m512i v) {
  const int count = __builtin_popcount(mask);
  _mm512_mask_storeu_epi32(dst, __mmask16((1u << count) - 1), _mm512_maskz_compress_epi32(mask, v));
  return count;
}

constexpr int kSample = 256;

// A key that at least k of keys[0, n) reach, and usually not many more.
uint32_t GuessBound(const uint32_t* keys, int64_t n, int64_t k) {
  uint32_t sample[kSample];
  const int64_t stride = n / kSample;
  for (int j = 0; j < kSample; ++j) sample[j] = keys[j * stride];
  const double expected = double(k) / double(n) * kSample;
  const int rank = std::min(kSample - 1, int(expected * 1.1) + 4);
  std::nth_element(sample, sample + rank, sample + kSample, std::greater<uint32_t>());
  return sample[rank];
}

}  // namespace

int64_t SelectTopK(float* scores, int64_t n, int64_t k, int32_t* out) {
  if (k >= n) {
    for (int64_t i = 0; i < n; ++i) out[i] = int32_t(i);
    return n;
  }
  if (k <= 0) return 0;
  auto* keys = reinterpret_cast<uint32_t*>(scores);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = Live(i, n);
    _mm512_mask_storeu_epi32(keys + i, live, Keys16(_mm512_maskz_loadu_ps(live, scores + i)));
  }
  topk::Threshold t;
  if (n < 4 * kSample) {
    t = topk::RadixThreshold(keys, n, k, 0, 0);
  } else {
    const __m512i bound = _mm512_set1_epi32(int(GuessBound(keys, n, k)));
    int64_t reach = 0;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 live = Live(i, n);
      reach += __builtin_popcount(
          _mm512_mask_cmpge_epu32_mask(live, _mm512_maskz_loadu_epi32(live, keys + i), bound));
    }
    if (reach < k) {  // the sample misled: resolve over every key
      t = topk::RadixThreshold(keys, n, k, 0, 0);
    } else {
      auto* candidates = reinterpret_cast<int32_t*>(out);
      int64_t m = 0;
      for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 live = Live(i, n);
        const __m512i key = _mm512_maskz_loadu_epi32(live, keys + i);
        m += Pack(candidates + m, _mm512_mask_cmpge_epu32_mask(live, key, bound), key);
      }
      t = topk::RadixThreshold(reinterpret_cast<const uint32_t*>(candidates), m, k, 0, 0);
    }
  }
  // Every key above T, and the first t.ties keys equal to it, in position order.
  const __m512i threshold = _mm512_set1_epi32(int(t.key));
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t taken = 0, ties = t.ties;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = Live(i, n);
    const __m512i key = _mm512_maskz_loadu_epi32(live, keys + i);
    uint32_t take = _mm512_mask_cmpgt_epu32_mask(live, key, threshold);
    uint32_t equal = _mm512_mask_cmpeq_epu32_mask(live, key, threshold);
    if (ties > 0 && equal != 0) {
      if (__builtin_popcount(equal) <= ties) {
        ties -= __builtin_popcount(equal);
        take |= equal;
      } else {
        for (; ties > 0; --ties) {  // the lowest positions first
          take |= equal & (0u - equal);
          equal &= equal - 1;
        }
      }
    }
    if (take != 0) {
      taken += Pack(out + taken, __mmask16(take), _mm512_add_epi32(lanes, _mm512_set1_epi32(int(i))));
    }
  }
  return taken;
}

}  // namespace tandem::kernels::avx512
