// AVX-512 building blocks shared by the AVX-512 kernel files (only those
// files, compiled with AVX-512 flags, may include this header). Each follows
// the canonical orders of kernel_table.h and exp_inline.h lane by lane.
#pragma once

#include <immintrin.h>

#include <cmath>

#include "kernels/exp_inline.h"
#include "kernels/weight_row.h"

namespace tandem::kernels::avx512 {

// 16 block-quantized weights starting at k (k % 16 == 0) as fp32, with the
// operations of quant_blocks.h's decode: integer unpacking, one conversion,
// then the same fp32 multiply (and subtract) with the block's scalar factors.
// An fp16 scale with F16C: exact, like HalfAt.
inline float HalfF16c(const uint8_t* p) { return _cvtsh_ss(uint16_t(p[0] | (p[1] << 8))); }

inline __m512 Nibbles16(const uint8_t* p, bool high) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i v = high ? _mm_srli_epi16(bytes, 4) : bytes;
  return _mm512_castsi512_ps(_mm512_cvtepu8_epi32(_mm_and_si128(v, _mm_set1_epi8(0x0f))));
}

template <WeightType kType>
inline __m512 LoadQuant16(const uint8_t* row, int64_t k) {
  static_assert(kType == WeightType::kQ4_0 || kType == WeightType::kQ5_0, "K-quants take quant_dot.h's integer path");
  {
    constexpr bool five = kType == WeightType::kQ5_0;
    const uint8_t* b = row + (k / 32) * (five ? kQ5_0BlockBytes : kQ4_0BlockBytes);
    const int e0 = int(k % 32);
    __m512i q = _mm512_castps_si512(Nibbles16(b + (five ? 6 : 2), e0 != 0));
    if constexpr (five) {
      const uint32_t qh = uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24;
      q = _mm512_mask_or_epi32(q, __mmask16(qh >> e0), q, _mm512_set1_epi32(16));
    }
    q = _mm512_sub_epi32(q, _mm512_set1_epi32(five ? 16 : 8));
    return _mm512_mul_ps(_mm512_set1_ps(HalfF16c(b)), _mm512_cvtepi32_ps(q));
  }
}

// 16 consecutive weights starting at k (k % 16 == 0, k + 16 <= cols) as fp32.
template <WeightType kType>
inline __m512 Load16(const uint8_t* row, int64_t k) {
  if constexpr (kType == WeightType::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else if constexpr (kType == WeightType::kF16) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  } else if constexpr (kType == WeightType::kBF16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else if constexpr (kType == WeightType::kQ8_0) {
    const uint8_t* block = row + (k / kQ8Block) * kQ8BlockBytes;
    const uint16_t d = uint16_t(block[0] | (block[1] << 8));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 2 + k % kQ8Block));
    const __m512 qf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(d)), qf);  // F16C: exact, like F16ToFloat
  } else {
    return LoadQuant16<kType>(row, k);
  }
}

inline float Reduce(__m512 acc) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

// Reduce() of 16 accumulators at once, with exactly Reduce's pairings
// (lane i + lane i+8, then i+4, i+2, i+1): lane 4q + k of the result is
// Reduce(acc[4k + q]). Used for a tile of 4 x 4 dot products.
inline __m512 Reduce16(const __m512* acc) {
  __m512 b[8];
  for (int i = 0; i < 8; ++i) {  // 256-bit halves: [s8(acc[2i]) | s8(acc[2i+1])]
    const __m512 lo = _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    b[i] = _mm512_add_ps(lo, hi);
  }
  __m512 c[4];
  for (int i = 0; i < 4; ++i) {  // quarters: s4 of acc[4i .. 4i+3]
    const __m512 lo = _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 hi = _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1));
    c[i] = _mm512_add_ps(lo, hi);
  }
  __m512 d[2];
  for (int i = 0; i < 2; ++i) {  // per quarter r: s2 of acc[8i + r] and acc[8i + 4 + r]
    const __m512 lo = _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 hi = _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2));
    d[i] = _mm512_add_ps(lo, hi);
  }
  // Quarter r: s1 of acc[r], acc[4 + r], acc[8 + r], acc[12 + r].
  const __m512 lo = _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(2, 0, 2, 0));
  const __m512 hi = _mm512_shuffle_ps(d[0], d[1], _MM_SHUFFLE(3, 1, 3, 1));
  return _mm512_add_ps(lo, hi);
}

// Reduce() of 8 accumulators at once, with exactly Reduce's pairings: lane a
// of the result is Reduce(acc[a]). About half the shuffles of eight Reduce()
// calls, which matters where a dot product is short (a 384-wide row is 24
// FMAs per output, against 4 shuffles per Reduce on the FMA's port).
inline __m256 Reduce8(const __m512* acc) {
  __m512 b[4];
  for (int p = 0; p < 4; ++p) {  // [s8(acc[2p]) | s8(acc[2p+1])]
    b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(acc[2 * p], acc[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 c[2];
  for (int q = 0; q < 2; ++q) {  // quarters: s4 of acc[4q .. 4q+3]
    c[q] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * q], b[2 * q + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(b[2 * q], b[2 * q + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  // Quarter k: s2 of acc[k] (lanes 0, 1) and acc[4 + k] (lanes 2, 3).
  const __m512 d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarter k: s1 of acc[k] in lane 4k, of acc[4 + k] in lane 4k + 1.
  const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(d, d, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(d, d, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, e));
}

// ExpInline (exp_inline.h), lane by lane, the same IEEE operations in the same order.
inline __m512 Exp16(__m512 x) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kExpLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kExpLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[i]));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpUnderflow), _CMP_LT_OQ), y,
                           _mm512_setzero_ps());
  y = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpOverflow), _CMP_GT_OQ), y,
                           _mm512_set1_ps(HUGE_VALF));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x);
}

// Attention tiled over query rows (attention_avx512.cc); false, doing
// nothing, where the head dimension does not suit it.
bool AttentionTiled(const AttentionQueries& queries, const PagedRows& k, const PagedRows& v,
                    const int32_t* positions, const AttentionShape& shape, float* scratch);

// Indexer scores tiled over query rows (indexer_avx512.cc); false, doing
// nothing, where the dimensions do not suit it.
bool IndexerTiled(const IndexerQueries& queries, const PagedRows& keys, bool fp8, int64_t begin,
                  int64_t end, float* scores, int64_t scores_stride, float* scratch);

// Top-k selection (topk_avx512.cc): the set of kernels::SelectTopK.
int64_t SelectTopK(float* scores, int64_t n, int64_t k, int32_t* out);

}  // namespace tandem::kernels::avx512
