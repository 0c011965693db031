// The SIMD integer kernels of quant_dot.h (numerics 3) over row-interleaved
// weights (quant_pack.h), written once over a vector "policy" P:
//   P::kRows     rows per vector: 16 (zmm) or 8 (ymm; a group of 16 rows is
//                two halves, each the first or second half of every vector)
//   P::kVnni     vpdpbusd / vpdpwssd; else vpmaddubsw + vpmaddwd
// One vector lane is one output row, so a block's integer T (and M) of kRows
// rows and one token come out of 4-element products summed in integers, exact
// in any order, and step 3's FMAs run per lane in block order: the bits of
// the scalar reference on every path.
//
// Only files compiled with AVX2 (or wider) flags include this header; its
// functions have internal linkage, so each keeps its own copy for its flags.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/status.h"
#include "kernels/quant_dot.h"
#include "kernels/quant_pack.h"

namespace tandem::kernels {
namespace {  // NOLINT: one copy per ISA's translation unit (see above)
namespace qgemm {

inline int32_t Load32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// AVX2: 8 rows per vector, vpmaddubsw + vpmaddwd (no pair saturates: the
// unsigned codes are at most 63, and Q8_0 multiplies |w| <= 128 by a
// sign-adjusted |a| <= 127).
struct Ymm {
  using I = __m256i;
  using F = __m256;
  static constexpr int kRows = 8;
  static constexpr bool kVnni = false;
  static I Load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I Zero() { return _mm256_setzero_si256(); }
  static I Set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I Set1b(int8_t v) { return _mm256_set1_epi8(v); }
  static I Bcast(const void* p) { return _mm256_set1_epi32(Load32(p)); }
  static I Dp(I acc, I u, I a) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)));
  }
  // Signed weights w (|w| <= 128 as |w| bytes): sum w a.
  static I DpSigned(I acc, I wabs, I w, I a) { return Dp(acc, wabs, _mm256_sign_epi8(a, w)); }
  static I Abs8(I w) { return _mm256_sign_epi8(w, w); }
  static I Dp16(I acc, I w, I a) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, a)); }
  static I And(I a, I b) { return _mm256_and_si256(a, b); }
  static I Or(I a, I b) { return _mm256_or_si256(a, b); }
  static I Add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I Sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I Mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static I Srl16(I a, int n) { return _mm256_srl_epi16(a, _mm_cvtsi32_si128(n)); }
  static I Sll16(I a, int n) { return _mm256_sll_epi16(a, _mm_cvtsi32_si128(n)); }
  static I Sll32(I a, int n) { return _mm256_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static I Sra32(I a, int n) { return _mm256_sra_epi32(a, _mm_cvtsi32_si128(n)); }
  // kRows bytes zero-extended to int32 lanes; 2 * kRows int8 as int16 lanes.
  static I U8x(const uint8_t* p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))); }
  static I S8Pairs(const uint8_t* p) { return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static F Cvt(I v) { return _mm256_cvtepi32_ps(v); }
  static F Halfs(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static F Zerof() { return _mm256_setzero_ps(); }
  static F Set1f(float v) { return _mm256_set1_ps(v); }
  static F Mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F Neg(F a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static F Fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  // Lanes [lo, hi) of v to y[lo, hi).
  static void Store(float* y, F v, int lo, int hi) {
    if (lo == 0 && hi == kRows) return _mm256_storeu_ps(y, v);
    alignas(32) int32_t m[kRows];
    for (int i = 0; i < kRows; ++i) m[i] = i >= lo && i < hi ? -1 : 0;
    _mm256_maskstore_ps(y, _mm256_load_si256(reinterpret_cast<const __m256i*>(m)), v);
  }
};

#ifdef __AVX512VNNI__
// AVX-512 VNNI: 16 rows per vector.
struct Zmm {
  using I = __m512i;
  using F = __m512;
  static constexpr int kRows = 16;
  static constexpr bool kVnni = true;
  static I Load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static I Zero() { return _mm512_setzero_si512(); }
  static I Set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I Set1b(int8_t v) { return _mm512_set1_epi8(v); }
  static I Bcast(const void* p) { return _mm512_set1_epi32(Load32(p)); }
  static I Dp(I acc, I u, I a) { return _mm512_dpbusd_epi32(acc, u, a); }
  static I Dp16(I acc, I w, I a) { return _mm512_dpwssd_epi32(acc, w, a); }
  static I And(I a, I b) { return _mm512_and_si512(a, b); }
  static I Or(I a, I b) { return _mm512_or_si512(a, b); }
  static I Xor(I a, I b) { return _mm512_xor_si512(a, b); }
  static I Add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I Sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I Mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static I Srl16(I a, int n) { return _mm512_srl_epi16(a, _mm_cvtsi32_si128(n)); }
  static I Sll16(I a, int n) { return _mm512_sll_epi16(a, _mm_cvtsi32_si128(n)); }
  static I Sll32(I a, int n) { return _mm512_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static I Sra32(I a, int n) { return _mm512_sra_epi32(a, _mm_cvtsi32_si128(n)); }
  static I U8x(const uint8_t* p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static I S8Pairs(const uint8_t* p) { return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static F Cvt(I v) { return _mm512_cvtepi32_ps(v); }
  static F Halfs(const uint8_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static F Zerof() { return _mm512_setzero_ps(); }
  static F Set1f(float v) { return _mm512_set1_ps(v); }
  static F Mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F Neg(F a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(int32_t(0x80000000u)))); }
  static F Fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void Store(float* y, F v, int lo, int hi) {
    if (lo == 0 && hi == kRows) return _mm512_storeu_ps(y, v);
    const __mmask16 m = __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
    _mm512_mask_storeu_ps(y, m, v);
  }
};
#endif

// The 8 code vectors (4 elements of each row each) of a 32-element run:
// nibble vectors at p (stride 64), optional fifth bits at hb.
template <class P>
inline void Nibbles(const uint8_t* p, const uint8_t* hb, int off, typename P::I* q) {
  const auto low4 = P::Set1b(0x0f);
  for (int h = 0; h < 4; ++h) {
    const auto v = P::Load(p + 64 * h + off);
    q[h] = P::And(v, low4);
    q[h + 4] = P::And(P::Srl16(v, 4), low4);
  }
  if (hb != nullptr) {
    const auto bits = P::Load(hb + off), sixteen = P::Set1b(0x10);
    for (int h = 0; h < 8; ++h) {
      const auto b = h <= 4 ? P::Sll16(bits, 4 - h) : P::Srl16(bits, h - 4);
      q[h] = P::Or(q[h], P::And(b, sixteen));
    }
  }
}

// A block's T for one token over the 8 code vectors of a run: two partial
// sums (independent chains), starting from `init`.
template <class P>
inline typename P::I RunDot(const typename P::I* q, const int8_t* a, typename P::I init) {
  auto s0 = init, s1 = P::Zero();
  for (int h = 0; h < 8; h += 2) {
    s0 = P::Dp(s0, q[h], P::Bcast(a + 4 * h));
    s1 = P::Dp(s1, q[h + 1], P::Bcast(a + 4 * h + 4));
  }
  return P::Add(s0, s1);
}

// Rows [half * kRows, half * kRows + kRows) of the 16-row group at `group`
// (its records of blocks 0 .. nb), tokens [t, t + N): every block's step 2
// and 3, then lanes [lo, hi) stored at y + token * y_stride + (lanes).
// How far ahead of the record in use a decode step's loads are requested.
constexpr int kAhead = 4096;

template <class P, WeightType kType, int N>
inline void Tile(const uint8_t* group, int64_t nb, const QuantizedActs& x, int t, int half, float* y,
                 int64_t y_stride, int lo, int hi) {
  using I = typename P::I;
  using F = typename P::F;
  constexpr int kRec = PackedRecordBytes(kType), kBlock = ActBlockFor(kType);
  constexpr PackedOffsets kOff = PackedOffsetsOf(kType);
  const int v_off = half * P::kRows * 4, h_off = half * P::kRows * 2, b_off = half * P::kRows;
  const int64_t sums_per_token = x.cols / 16;
  F acc[N];
  for (int j = 0; j < N; ++j) acc[j] = P::Zerof();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec = group + b * kRec;
    if constexpr (N <= 2) {  // decode streams each weight once: ask for the bytes kAhead on
      for (int o = 0; o < kRec; o += 64) _mm_prefetch(reinterpret_cast<const char*>(rec + kAhead + o), _MM_HINT_T0);
    }
    const int8_t* a[N];
    const int16_t* s[N];
    F da[N];
    for (int j = 0; j < N; ++j) {
      a[j] = x.q + (t + j) * x.cols + b * kBlock;
      s[j] = x.sums + (t + j) * sums_per_token + b * (kBlock / 16);
      da[j] = P::Set1f(x.d[(t + j) * nb + b]);
    }
    const F d = P::Halfs(rec + kOff.d + h_off);
    if constexpr (kType == WeightType::kQ8_0 || kType == WeightType::kQ4_0 || kType == WeightType::kQ5_0) {
      I q[8];
      int bias = 0;
      if constexpr (kType == WeightType::kQ8_0) {
        if constexpr (P::kVnni) {  // (w + 128) as unsigned bytes, then - 128 A
          for (int h = 0; h < 8; ++h) q[h] = P::Xor(P::Load(rec + 64 * h + v_off), P::Set1b(int8_t(0x80)));
          bias = 128;
        } else {
          for (int h = 0; h < 8; ++h) q[h] = P::Load(rec + 64 * h + v_off);
        }
      } else {
        Nibbles<P>(rec, kType == WeightType::kQ5_0 ? rec + kOff.hb : nullptr, v_off, q);
        bias = kType == WeightType::kQ5_0 ? 16 : 8;
      }
      for (int j = 0; j < N; ++j) {
        I v;
        if constexpr (kType == WeightType::kQ8_0 && !P::kVnni) {
          I s0 = P::Zero(), s1 = P::Zero();
          for (int h = 0; h < 8; h += 2) {
            s0 = P::DpSigned(s0, P::Abs8(q[h]), q[h], P::Bcast(a[j] + 4 * h));
            s1 = P::DpSigned(s1, P::Abs8(q[h + 1]), q[h + 1], P::Bcast(a[j] + 4 * h + 4));
          }
          v = P::Add(s0, s1);
        } else {
          v = RunDot<P>(q, a[j], P::Set1(-bias * (int32_t(s[j][0]) + s[j][1])));
        }
        acc[j] = P::Fma(P::Cvt(v), P::Mul(d, da[j]), acc[j]);
      }
    } else if constexpr (kType == WeightType::kQ4_K || kType == WeightType::kQ5_K) {
      I tv[N];
      for (int j = 0; j < N; ++j) tv[j] = P::Zero();
      for (int r = 0; r < 8; ++r) {
        I q[8];
        Nibbles<P>(rec + 256 * r, kType == WeightType::kQ5_K ? rec + kOff.hb + 64 * r : nullptr, v_off, q);
        const I sc = P::U8x(rec + kOff.scales + 16 * r + b_off);
        for (int j = 0; j < N; ++j) tv[j] = P::Add(tv[j], P::Mullo(RunDot<P>(q, a[j] + 32 * r, P::Zero()), sc));
      }
      I mm[8];  // (m, m) as int16 pairs: m times both sums of 16 of the run
      for (int r = 0; r < 8; ++r) {
        const I m = P::U8x(rec + kOff.mins + 16 * r + b_off);
        mm[r] = P::Or(m, P::Sll32(m, 16));
      }
      const F dmin = P::Halfs(rec + kOff.dmin + h_off);
      for (int j = 0; j < N; ++j) {
        I m0 = P::Zero(), m1 = P::Zero();
        for (int r = 0; r < 8; r += 2) {
          m0 = P::Dp16(m0, mm[r], P::Bcast(s[j] + 2 * r));
          m1 = P::Dp16(m1, mm[r + 1], P::Bcast(s[j] + 2 * r + 2));
        }
        acc[j] = P::Fma(P::Cvt(tv[j]), P::Mul(d, da[j]), acc[j]);
        acc[j] = P::Fma(P::Cvt(P::Add(m0, m1)), P::Neg(P::Mul(dmin, da[j])), acc[j]);  // -(dmin * da), as FoldBlock
      }
    } else {
      static_assert(kType == WeightType::kQ6_K);
      I tv[N];
      for (int j = 0; j < N; ++j) tv[j] = P::Zero();
      const I low4 = P::Set1b(0x0f), two = P::Set1b(0x30);
      for (int u = 0; u < 8; ++u) {
        I q[8];
        const I h0 = P::Load(rec + kOff.hb + 128 * u + v_off), h1 = P::Load(rec + kOff.hb + 128 * u + 64 + v_off);
        for (int h = 0; h < 4; ++h) {
          const I v = P::Load(rec + 256 * u + 64 * h + v_off);
          const I b0 = h < 3 ? P::Sll16(h0, 4 - 2 * h) : P::Srl16(h0, 2);
          const I b1 = h < 3 ? P::Sll16(h1, 4 - 2 * h) : P::Srl16(h1, 2);
          q[h] = P::Or(P::And(v, low4), P::And(b0, two));
          q[h + 4] = P::Or(P::And(P::Srl16(v, 4), low4), P::And(b1, two));
        }
        const I sp = P::S8Pairs(rec + kOff.scales + 32 * u + h_off);
        const I se = P::Sra32(P::Sll32(sp, 16), 16), so = P::Sra32(sp, 16);
        for (int j = 0; j < N; ++j) {
          I lo0 = P::Zero(), lo1 = P::Zero(), hi0 = P::Zero(), hi1 = P::Zero();
          const int8_t* ar = a[j] + 32 * u;
          lo0 = P::Dp(lo0, q[0], P::Bcast(ar));
          lo1 = P::Dp(lo1, q[1], P::Bcast(ar + 4));
          lo0 = P::Dp(lo0, q[2], P::Bcast(ar + 8));
          lo1 = P::Dp(lo1, q[3], P::Bcast(ar + 12));
          hi0 = P::Dp(hi0, q[4], P::Bcast(ar + 16));
          hi1 = P::Dp(hi1, q[5], P::Bcast(ar + 20));
          hi0 = P::Dp(hi0, q[6], P::Bcast(ar + 24));
          hi1 = P::Dp(hi1, q[7], P::Bcast(ar + 28));
          tv[j] = P::Add(tv[j], P::Add(P::Mullo(P::Add(lo0, lo1), se), P::Mullo(P::Add(hi0, hi1), so)));
        }
      }
      I sp[8];
      for (int u = 0; u < 8; ++u) sp[u] = P::S8Pairs(rec + kOff.scales + 32 * u + h_off);
      for (int j = 0; j < N; ++j) {
        I u0 = P::Zero(), u1 = P::Zero();
        for (int u = 0; u < 8; u += 2) {
          u0 = P::Dp16(u0, sp[u], P::Bcast(s[j] + 2 * u));
          u1 = P::Dp16(u1, sp[u + 1], P::Bcast(s[j] + 2 * u + 2));
        }
        const I total = P::Sub(tv[j], P::Sll32(P::Add(u0, u1), 5));
        acc[j] = P::Fma(P::Cvt(total), P::Mul(d, da[j]), acc[j]);
      }
    }
  }
  for (int j = 0; j < N; ++j) P::Store(y + (t + j) * y_stride, acc[j], lo, hi);
}

// Rows [r0, r1) of w over tokens [0, n): groups of 16 rows from `base_row`
// at `packed`; tokens in blocks of 64 (their activations stay in L2 while a
// thread's rows pass), kN at a time against each group.
template <class P, WeightType kType, int kN>
void MatMulPacked(const WeightMatrix& w, const uint8_t* packed, int64_t base_row, const QuantizedActs& x,
                  int n_tokens, float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  constexpr int kRec = PackedRecordBytes(kType);
  const int64_t nb = w.cols / ActBlockFor(kType);
  constexpr int kTokenBlock = 64;
  for (int t0 = 0; t0 < n_tokens; t0 += kTokenBlock) {
    const int t1 = std::min(n_tokens, t0 + kTokenBlock);
    for (int64_t g = base_row + (r0 - base_row) / kPackRows * kPackRows; g < r1; g += kPackRows) {
      const uint8_t* group = packed + (g - base_row) / kPackRows * nb * kRec;
      for (int half = 0; half < kPackRows / P::kRows; ++half) {
        const int64_t v0 = g + half * P::kRows;  // the vector's first row
        const int lo = int(std::clamp<int64_t>(r0 - v0, 0, P::kRows));
        const int hi = int(std::clamp<int64_t>(r1 - v0, 0, P::kRows));
        if (lo >= hi) continue;
        float* yv = y + v0;
        int t = t0;
        for (; t + kN <= t1; t += kN) Tile<P, kType, kN>(group, nb, x, t, half, yv, y_stride, lo, hi);
        if constexpr (kN > 4) {
          for (; t + 4 <= t1; t += 4) Tile<P, kType, 4>(group, nb, x, t, half, yv, y_stride, lo, hi);
        }
        for (; t + 2 <= t1; t += 2) Tile<P, kType, 2>(group, nb, x, t, half, yv, y_stride, lo, hi);
        for (; t < t1; ++t) Tile<P, kType, 1>(group, nb, x, t, half, yv, y_stride, lo, hi);
      }
    }
  }
}

// matmul_rows_q on policy P: the matrix's packing, or this call's rows
// packed into a per-thread buffer when it has none.
template <class P, int kN>
void MatMulRowsQ(const WeightMatrix& w, const QuantizedActs& x, int n_tokens, float* y, int64_t y_stride,
                 int64_t r0, int64_t r1) {
  if (r0 >= r1 || n_tokens < 1) return;
  TANDEM_CHECK_MSG(PackedRecordBytes(w.type) > 0, "matmul_rows_q takes block-quantized weights only");
  const uint8_t* packed = w.packed;
  int64_t base = 0;
  if (packed == nullptr) {
    thread_local std::vector<uint8_t> buffer;
    base = r0 / kPackRows * kPackRows;
    buffer.resize(PackedBytes(w.type, r1 - base, w.cols, ActBlockFor(w.type)));
    PackRows(w, base, r1, buffer.data());
    packed = buffer.data();
  }
  switch (w.type) {
    case WeightType::kQ8_0: return MatMulPacked<P, WeightType::kQ8_0, kN>(w, packed, base, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ4_0: return MatMulPacked<P, WeightType::kQ4_0, kN>(w, packed, base, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ5_0: return MatMulPacked<P, WeightType::kQ5_0, kN>(w, packed, base, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ4_K: return MatMulPacked<P, WeightType::kQ4_K, kN>(w, packed, base, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ5_K: return MatMulPacked<P, WeightType::kQ5_K, kN>(w, packed, base, x, n_tokens, y, y_stride, r0, r1);
    case WeightType::kQ6_K: return MatMulPacked<P, WeightType::kQ6_K, kN>(w, packed, base, x, n_tokens, y, y_stride, r0, r1);
    default: return;
  }
}

}  // namespace qgemm
}  // namespace
}  // namespace tandem::kernels
