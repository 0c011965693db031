// The integer dot products of quant_dot.h with 256-bit integer SIMD (AVX2:
// vpmaddubsw, vpmaddwd), shared by the AVX2 and AVX-512 kernel files. Each
// block's integers are exact, so they equal the reference's; the fp32 steps
// are quant_dot.h's own functions. Only files compiled with AVX2 (or wider)
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

inline __m256i Load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// sum over pairs of (u8 w) * (s8 a), weighted by the int16 scales `s` (per
// pair), as 8 int32 partial sums. |w| <= 128 and |a| <= 127: no pair saturates.
inline __m256i Madd(__m256i w, __m256i a, __m256i s) { return _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), s); }

// 32 four-bit values (16 bytes) as 32 bytes: low nibbles first, then high.
inline __m256i Nibbles32(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Bit k of the 32-bit value as 0x10 in byte k (Q5_0's fifth bits).
inline __m256i Bits32(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

// Bit `j` of each byte of v (j <= 7) as 0x10 in that byte.
inline __m256i BitAsSixteen(__m256i v, int j) {
  const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(j)), _mm256_set1_epi8(1));
  return _mm256_slli_epi16(bit, 4);
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

// Steps 2 and 3 for one weight block and kT tokens: a[t] points at the
// block's activations of token t, s[t] at their sums of 16, sc[t] holds its
// scales; the block's integer lanes are folded into acc[t]. (Each token's
// min lanes are made and folded at once: eight tokens' lanes would not fit
// the registers beside their accumulators.)
template <WeightType kType, int kT>
inline void BlockFold(const uint8_t* b, const int8_t* const* a, const int16_t* const* s, const BlockScales* sc,
                      __m256* acc) {
  __m256i l1[kT];
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (kType == WeightType::kQ8_0 || kType == WeightType::kQ4_0 || kType == WeightType::kQ5_0) {
    __m256i w;  // signed weights
    if constexpr (kType == WeightType::kQ8_0) {
      w = Load(b + 2);
    } else {
      constexpr bool five = kType == WeightType::kQ5_0;
      w = Nibbles32(b + (five ? 6 : 2));
      if constexpr (five) {
        const uint32_t qh = uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24;
        w = _mm256_or_si256(w, Bits32(qh));
      }
      w = _mm256_sub_epi8(w, _mm256_set1_epi8(five ? 16 : 8));
    }
    const __m256i wabs = _mm256_sign_epi8(w, w);
    for (int t = 0; t < kT; ++t) l1[t] = Madd(wabs, _mm256_sign_epi8(Load(a[t]), w), ones);
  } else if constexpr (kType == WeightType::kQ4_K || kType == WeightType::kQ5_K) {
    constexpr bool five = kType == WeightType::kQ5_K;
    alignas(16) uint8_t sm[16];
    ScalesMinsK4(b + 4, sm);
    for (int t = 0; t < kT; ++t) l1[t] = _mm256_setzero_si256();
    const uint8_t* qs = b + 16 + (five ? 32 : 0);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = Load(qs + 32 * c);
      __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
      if constexpr (five) {
        const __m256i qh = Load(b + 16);
        lo = _mm256_or_si256(lo, BitAsSixteen(qh, 2 * c));
        hi = _mm256_or_si256(hi, BitAsSixteen(qh, 2 * c + 1));
      }
      const __m256i slo = _mm256_set1_epi16(sm[2 * c]), shi = _mm256_set1_epi16(sm[2 * c + 1]);
      for (int t = 0; t < kT; ++t) {
        l1[t] = _mm256_add_epi32(l1[t], Madd(lo, Load(a[t] + 64 * c), slo));
        l1[t] = _mm256_add_epi32(l1[t], Madd(hi, Load(a[t] + 64 * c + 32), shi));
      }
    }
    // Each min twice (its sub-block's two sums of 16): lane i is m_i (S_2i + S_2i+1).
    const __m128i mins = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8));
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins, mins));
    for (int t = 0; t < kT; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(sc[t].s1), _mm256_cvtepi32_ps(l1[t]), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(sc[t].s2), _mm256_cvtepi32_ps(_mm256_madd_epi16(m16, Load(s[t]))), acc[t]);
    }
    return;
  } else {
    static_assert(kType == WeightType::kQ6_K);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    for (int t = 0; t < kT; ++t) {  // lane i: - 32 (sc_2i S_2i + sc_2i+1 S_2i+1)
      l1[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, Load(s[t])), 5));
    }
    const __m256i low4 = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(3);
    for (int u = 0; u < 8; ++u) {  // elements [32u, 32u + 32)
      const int half = u / 4, quarter = u % 4;
      __m256i ql = Load(b + half * 64 + (quarter & 1) * 32);
      if (quarter >= 2) ql = _mm256_srli_epi16(ql, 4);
      const __m256i qh = _mm256_and_si256(
          _mm256_srl_epi16(Load(b + 128 + half * 32), _mm_cvtsi32_si128(2 * quarter)), two);
      const __m256i w = _mm256_or_si256(_mm256_and_si256(ql, low4), _mm256_slli_epi16(qh, 4));
      const __m256i scale = _mm256_set_m128i(_mm_set1_epi16(int8_t(b[192 + 2 * u + 1])),
                                          _mm_set1_epi16(int8_t(b[192 + 2 * u])));
      for (int t = 0; t < kT; ++t) l1[t] = _mm256_add_epi32(l1[t], Madd(w, Load(a[t] + 32 * u), scale));
    }
  }
  for (int t = 0; t < kT; ++t) acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(sc[t].s1), _mm256_cvtepi32_ps(l1[t]), acc[t]);
}

// quant_dot.h's ReduceIntLanes on a vector: i += i + 4, i += i + 2, i += i + 1.
inline float ReduceLanes8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

#ifdef __AVX512BW__
// The K-quants' step 2 with 512-bit integer SIMD (AVX-512BW; only the AVX-512
// file sees it): 64 elements per instruction, two sub-blocks (or runs of 32)
// side by side. Their lanes i and i + 8 are both quant_dot.h's lane i, so
// adding them (exact) gives the same 8 integer lanes as the 256-bit code.
namespace zmm {

inline __m512i Madd(__m512i w, __m512i a, __m512i s) { return _mm512_madd_epi16(_mm512_maddubs_epi16(w, a), s); }
inline __m256i Fold16(__m512i v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
// 32 bytes in both halves of a 512-bit vector.
inline __m512i Twice(const uint8_t* p) { return _mm512_broadcast_i64x4(Load(p)); }
// One 16-bit value in the lower half, another in the upper.
inline __m512i Halves16(int lo, int hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(int16_t(lo))), _mm256_set1_epi16(int16_t(hi)), 1);
}

template <WeightType kType, int kT>
inline void BlockFold(const uint8_t* b, const int8_t* const* a, const int16_t* const* s, const BlockScales* sc,
                      __m256* acc) {
  __m512i l1[kT];
  for (int t = 0; t < kT; ++t) l1[t] = _mm512_setzero_si512();
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  if constexpr (kType == WeightType::kQ4_K || kType == WeightType::kQ5_K) {
    constexpr bool five = kType == WeightType::kQ5_K;
    alignas(16) uint8_t sm[16];
    ScalesMinsK4(b + 4, sm);
    const uint8_t* qs = b + 16 + (five ? 32 : 0);
    const __m512i nibble = Halves16(0, 4);  // sub-block 2c: low nibbles; 2c + 1: high
    for (int c = 0; c < 4; ++c) {
      __m512i w = _mm512_and_si512(_mm512_srlv_epi16(Twice(qs + 32 * c), nibble), low4);
      if constexpr (five) {
        const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(Twice(b + 16), Halves16(2 * c, 2 * c + 1)),
                                             _mm512_set1_epi8(1));
        w = _mm512_or_si512(w, _mm512_slli_epi16(bit, 4));
      }
      const __m512i scale = Halves16(sm[2 * c], sm[2 * c + 1]);
      for (int t = 0; t < kT; ++t) l1[t] = _mm512_add_epi32(l1[t], Madd(w, _mm512_loadu_si512(a[t] + 64 * c), scale));
    }
    const __m128i mins = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm + 8));
    const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mins, mins));
    for (int t = 0; t < kT; ++t) {
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(sc[t].s1), _mm256_cvtepi32_ps(Fold16(l1[t])), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(sc[t].s2), _mm256_cvtepi32_ps(_mm256_madd_epi16(m16, Load(s[t]))), acc[t]);
    }
  } else {
    static_assert(kType == WeightType::kQ6_K);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    const __m512i sc_wide = _mm512_castsi256_si512(sc16), three = _mm512_set1_epi8(3);
    for (int p = 0; p < 4; ++p) {  // runs u = 2p and 2p + 1: elements [64p, 64p + 64)
      const int half = p / 2, quarter = 2 * (p % 2);
      __m512i ql = _mm512_loadu_si512(b + half * 64);
      if (quarter == 2) ql = _mm512_srli_epi16(ql, 4);
      const __m512i qh = _mm512_and_si512(
          _mm512_srlv_epi16(Twice(b + 128 + half * 32), Halves16(2 * quarter, 2 * quarter + 2)), three);
      const __m512i w = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_slli_epi16(qh, 4));
      // 16-bit element e takes scale 4p + e / 8.
      const __m512i idx = _mm512_add_epi16(_mm512_set1_epi16(int16_t(4 * p)),
                                           _mm512_srli_epi16(_mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
                                                                              15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3));
      const __m512i scale = _mm512_permutexvar_epi16(idx, sc_wide);
      for (int t = 0; t < kT; ++t) l1[t] = _mm512_add_epi32(l1[t], Madd(w, _mm512_loadu_si512(a[t] + 64 * p), scale));
    }
    for (int t = 0; t < kT; ++t) {  // lane i: - 32 (sc_2i S_2i + sc_2i+1 S_2i+1)
      const __m256i minus = _mm256_slli_epi32(_mm256_madd_epi16(sc16, Load(s[t])), 5);
      const __m256i lanes = _mm256_sub_epi32(Fold16(l1[t]), minus);
      acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(sc[t].s1), _mm256_cvtepi32_ps(lanes), acc[t]);
    }
  }
}

}  // namespace zmm
#endif

// BlockHalvesOf with F16C (exact, like HalfAt).
template <WeightType kType>
inline BlockHalves Halves(const uint8_t* b) {
  auto half = [](const uint8_t* p) { return _cvtsh_ss(uint16_t(p[0] | (p[1] << 8))); };
  if constexpr (HasMins(kType)) return {half(b), half(b + 2)};
  if constexpr (kType == WeightType::kQ6_K) return {half(b + 208), 0.0f};
  return {half(b), 0.0f};
}

// Row r against tokens [t, t + kT): every block's integer lanes, folded in order.
template <WeightType kType, int kT>
inline void RowTokens(const WeightMatrix& w, const QuantizedActs& x, int t, float* y, int64_t y_stride,
                      int64_t r) {
  constexpr int kBlock = ActBlockFor(kType), kBytes = WeightBlockBytes(kType);
  const int64_t nb = w.cols / kBlock;
  const uint8_t* row = w.data + r * int64_t(w.row_bytes);
  __m256 acc[kT];
  const int8_t* a[kT];
  const int16_t* s[kT];
  const float* da[kT];
  for (int j = 0; j < kT; ++j) {
    acc[j] = _mm256_setzero_ps();
    a[j] = x.q + (t + j) * x.cols;
    s[j] = x.sums + (t + j) * (x.cols / 16);
    da[j] = x.d + (t + j) * nb;
  }
  BlockScales sc[kT];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = row + b * kBytes;
    const BlockHalves halves = Halves<kType>(wb);
    for (int j = 0; j < kT; ++j) sc[j] = ScalesFor(halves, da[j][b]);
#ifdef __AVX512BW__
    if constexpr (kBlock == kSuperBlock) {
      zmm::BlockFold<kType, kT>(wb, a, s, sc, acc);
    } else {
      BlockFold<kType, kT>(wb, a, s, sc, acc);
    }
#else
    BlockFold<kType, kT>(wb, a, s, sc, acc);
#endif
    for (int j = 0; j < kT; ++j) {
      a[j] += kBlock;
      s[j] += kBlock / 16;
    }
  }
  for (int j = 0; j < kT; ++j) y[(t + j) * y_stride + r] = ReduceLanes8(acc[j]);
}

// Tokens in blocks of 64 (their activations stay in L2 while the rows pass),
// four at a time against each row.
template <WeightType kType>
void MatMulRowsQ(const WeightMatrix& w, const QuantizedActs& x, int n_tokens, float* y, int64_t y_stride,
                 int64_t r0, int64_t r1) {
  constexpr int kTokenBlock = 64;
  for (int t0 = 0; t0 < n_tokens; t0 += kTokenBlock) {
    const int t1 = std::min(n_tokens, t0 + kTokenBlock);
    for (int64_t r = r0; r < r1; ++r) {
      int t = t0;
#ifdef __AVX512F__  // 32 vector registers: eight tokens' accumulators fit
      for (; t + 8 <= t1; t += 8) RowTokens<kType, 8>(w, x, t, y, y_stride, r);
#endif
      for (; t + 4 <= t1; t += 4) RowTokens<kType, 4>(w, x, t, y, y_stride, r);
      switch (t1 - t) {
        case 3: RowTokens<kType, 3>(w, x, t, y, y_stride, r); break;
        case 2: RowTokens<kType, 2>(w, x, t, y, y_stride, r); break;
        case 1: RowTokens<kType, 1>(w, x, t, y, y_stride, r); break;
        default: break;
      }
    }
  }
}

inline void MatMulRowsQAny(const WeightMatrix& w, const QuantizedActs& x, int n_tokens, float* y, int64_t y_stride,
                           int64_t r0, int64_t r1) {
  switch (w.type) {
    case WeightType::kQ8_0: return MatMulRowsQ<WeightType::kQ8_0>(w, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ4_0: return MatMulRowsQ<WeightType::kQ4_0>(w, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ5_0: return MatMulRowsQ<WeightType::kQ5_0>(w, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ4_K: return MatMulRowsQ<WeightType::kQ4_K>(w, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ5_K: return MatMulRowsQ<WeightType::kQ5_K>(w, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ6_K: return MatMulRowsQ<WeightType::kQ6_K>(w, x, n_tokens, y, y_stride, r0, r1);
    default: return;
  }
}

}  // namespace ymm
}  // namespace
}  // namespace tandem::kernels
