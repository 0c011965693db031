#include <immintrin.h>

#include "kernels/roofline.h"

namespace tandem::kernels {

float StreamReadAvx512(const float* data, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(data + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(data + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(data + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(data + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

float FmaLoopAvx512(int64_t iters) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(float(i) * 1e-3f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], m, c);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

float Int8LoopAvx512(int64_t iters) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(-2), ones = _mm512_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it) {
    // Each chain feeds its own next multiply (constant operands would be hoisted out of the loop).
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_madd_epi16(_mm512_maddubs_epi16(acc[i], a), ones);
  }
  __m512i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, acc[i]);
  return float(_mm512_reduce_add_epi32(s));
}

__attribute__((target("avx512vnni"))) float Int8LoopVnni(int64_t iters) {
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i w = _mm512_set1_epi8(3), a = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], w, a);
  }
  __m512i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, acc[i]);
  return float(_mm512_reduce_add_epi32(s));
}

}  // namespace tandem::kernels
