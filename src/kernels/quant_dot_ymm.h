// quant_dot.h's step 1 (activation quantization) with 256-bit SIMD, shared
// by the AVX2 and AVX-512 kernel files (steps 2 and 3: quant_gemm.h). Only files compiled with AVX2 (or wider)
// flags include this header; its functions have internal linkage, so each
// such file keeps its own copy, built with its own flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "common/aligned.h"
#include "kernels/quant_dot.h"

namespace tandem::kernels {
namespace {  // NOLINT: one copy per ISA's translation unit (see above)
namespace ymm {

inline int32_t Hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// quant_dot.h's step 1 for token rows of x, 32 elements at a time.
inline void QuantizeActs(const float* x, int64_t x_stride, int n_tokens, int64_t cols, int block, int8_t* q,
                         float* d, int16_t* sums) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * x_stride;
    for (int64_t b0 = 0; b0 < cols; b0 += block) {
      __m256 m = _mm256_setzero_ps();
      for (int k = 0; k < block; k += 8) m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xt + b0 + k), abs_mask), m);
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
      const float amax = _mm_cvtss_f32(m4);
      const float dd = amax / 127.0f;
      const float id = dd >= FLT_MIN ? 1.0f / dd : 0.0f;
      d[(t * cols + b0) / block] = dd;
      const __m256 idv = _mm256_set1_ps(id);
      for (int k = 0; k < block; k += 32) {
        __m256i iv[4];
        for (int i = 0; i < 4; ++i) {
          __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xt + b0 + k + 8 * i), idv);
          v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
          iv[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
        }
        const __m256i bytes = _mm256_permutevar8x32_epi32(
            _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3])), order);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + t * cols + b0 + k), bytes);
        int16_t* st = sums + (t * cols + b0 + k) / 16;
        st[0] = int16_t(Hsum(_mm256_add_epi32(iv[0], iv[1])));
        st[1] = int16_t(Hsum(_mm256_add_epi32(iv[2], iv[3])));
      }
    }
  }
}

}  // namespace ymm
}  // namespace
}  // namespace tandem::kernels
