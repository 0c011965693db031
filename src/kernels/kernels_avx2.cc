// AVX2/FMA kernels in the canonical order (kernel_table.h): the 16 lanes of
// one accumulator live in two ymm registers (lanes 0-7 and 8-15).
#include <immintrin.h>

#include "kernels/attention_impl.h"
#include "kernels/indexer_impl.h"
#include "kernels/topk.h"
#include "common/fp8.h"
#include "kernels/exp_inline.h"
#include "kernels/quant_dot_ymm.h"
#include "kernels/quant_gemm.h"
#include "kernels/weight_row.h"

namespace tandem::kernels {
namespace {

struct Lanes16 {
  __m256 lo, hi;
};

template <WeightType kType>
inline Lanes16 Load16(const uint8_t* row, int64_t k) {
  if constexpr (kType == WeightType::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + k;
    return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
  } else if constexpr (kType == WeightType::kF16) {
    const __m128i* p = reinterpret_cast<const __m128i*>(row + 2 * k);
    return {_mm256_cvtph_ps(_mm_loadu_si128(p)), _mm256_cvtph_ps(_mm_loadu_si128(p + 1))};
  } else if constexpr (kType == WeightType::kBF16) {
    const __m128i* p = reinterpret_cast<const __m128i*>(row + 2 * k);
    auto widen = [](__m128i h) {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    };
    return {widen(_mm_loadu_si128(p)), widen(_mm_loadu_si128(p + 1))};
  } else if constexpr (kType == WeightType::kQ8_0) {
    const uint8_t* block = row + (k / kQ8Block) * kQ8BlockBytes;
    const uint16_t d = uint16_t(block[0] | (block[1] << 8));
    const __m256 dv = _mm256_set1_ps(F16ToFloat(d));
    const uint8_t* q = block + 2 + k % kQ8Block;
    const __m256 lo = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))));
    const __m256 hi = _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8))));
    return {_mm256_mul_ps(dv, lo), _mm256_mul_ps(dv, hi)};
  } else {
    alignas(32) float w[kLanes];
    Decode16(kType, row, k, w);
    return {_mm256_load_ps(w), _mm256_load_ps(w + 8)};
  }
}

inline float Reduce(const Lanes16& acc) {
  __m256 s8 = _mm256_add_ps(acc.lo, acc.hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

inline void Fma(const Lanes16& w, const float* x, Lanes16& acc) {
  acc.lo = _mm256_fmadd_ps(w.lo, _mm256_loadu_ps(x), acc.lo);
  acc.hi = _mm256_fmadd_ps(w.hi, _mm256_loadu_ps(x + 8), acc.hi);
}

template <WeightType kType, int kRows, int kTokens>
void Tile(const WeightMatrix& w, const float* x, int64_t x_stride, float* y, int64_t y_stride,
          int64_t r, int t) {
  Lanes16 acc[kRows][kTokens];
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kTokens; ++j) acc[i][j] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  const uint8_t* rows[kRows];
  for (int i = 0; i < kRows; ++i) rows[i] = w.data + (r + i) * w.row_bytes;
  const float* xs[kTokens];
  for (int j = 0; j < kTokens; ++j) xs[j] = x + (t + j) * x_stride;
  const int64_t n = w.cols;
  const int64_t full = n / kLanes * kLanes;
  for (int64_t k = 0; k < full; k += kLanes) {
    Lanes16 wv[kRows];
    for (int i = 0; i < kRows; ++i) wv[i] = Load16<kType>(rows[i], k);
    for (int j = 0; j < kTokens; ++j)
      for (int i = 0; i < kRows; ++i) Fma(wv[i], xs[j] + k, acc[i][j]);
  }
  if (full < n) {
    alignas(32) float wt[kLanes], xt[kLanes];
    for (int i = 0; i < kRows; ++i) {
      for (int j = 0; j < kTokens; ++j) {
        LoadTail(kType, rows[i], xs[j], full, n, wt, xt);
        Fma({_mm256_load_ps(wt), _mm256_load_ps(wt + 8)}, xt, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kTokens; ++j) y[(t + j) * y_stride + r + i] = Reduce(acc[i][j]);
}

template <WeightType kType, int kRows>
void RowBlock(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
              int64_t y_stride, int64_t r) {
  int t = 0;
  for (; t + 2 <= n_tokens; t += 2) Tile<kType, kRows, 2>(w, x, x_stride, y, y_stride, r, t);
  for (; t < n_tokens; ++t) Tile<kType, kRows, 1>(w, x, x_stride, y, y_stride, r, t);
}

template <WeightType kType>
void MatMulTyped(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
                 int64_t y_stride, int64_t r0, int64_t r1) {
  int64_t r = r0;
  for (; r + 2 <= r1; r += 2) RowBlock<kType, 2>(w, x, x_stride, n_tokens, y, y_stride, r);
  for (; r < r1; ++r) RowBlock<kType, 1>(w, x, x_stride, n_tokens, y, y_stride, r);
}

void MatMulRows(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
                int64_t y_stride, int64_t r0, int64_t r1) {
  switch (w.type) {
    case WeightType::kF32: return MatMulTyped<WeightType::kF32>(w, x, x_stride, n_tokens, y, y_stride, r0, r1);
    case WeightType::kF16: return MatMulTyped<WeightType::kF16>(w, x, x_stride, n_tokens, y, y_stride, r0, r1);
    case WeightType::kBF16: return MatMulTyped<WeightType::kBF16>(w, x, x_stride, n_tokens, y, y_stride, r0, r1);
    default: return MatMulRowsViaActs(Avx2Table(), w, x, x_stride, n_tokens, y, y_stride, r0, r1);
  }
}

inline float Dot(const float* a, const float* b, int64_t n) {
  Lanes16 acc{_mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) Fma({_mm256_loadu_ps(a + k), _mm256_loadu_ps(a + k + 8)}, b + k, acc);
  if (k < n) {
    alignas(32) float at[kLanes], bt[kLanes];
    LoadTail(WeightType::kF32, reinterpret_cast<const uint8_t*>(a), b, k, n, at, bt);
    Fma({_mm256_load_ps(at), _mm256_load_ps(at + 8)}, bt, acc);
  }
  return Reduce(acc);
}

inline void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = __builtin_fmaf(a, x[i], y[i]);
}

// ExpInline (exp_inline.h), lane by lane, the same IEEE operations in the same order.
inline __m256 Exp8(__m256 x) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kExpLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kExpLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[i]));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(kExpUnderflow), _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(HUGE_VALF), _mm256_cmp_ps(x, _mm256_set1_ps(kExpOverflow), _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

struct Avx2Ops {
  static void DecodeFp8(const uint8_t* q, int64_t n, float* out) {
    const float* table = Fp8E4M3Table();
    for (int64_t i = 0; i < n; ++i) out[i] = table[q[i]];
  }
  static float Dot(const float* a, const float* b, int64_t n) { return kernels::Dot(a, b, n); }
  static void Axpy(float a, const float* x, float* y, int64_t n) { kernels::Axpy(a, x, y, n); }
  static void ExpMinus(float* x, int64_t n, float m) {
    const __m256 mv = _mm256_set1_ps(m);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, Exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)));
    for (; i < n; ++i) x[i] = ExpInline(x[i] - m);
  }
};

void IndexerScores(const IndexerQueries& queries, const PagedRows& keys, bool fp8, int64_t begin,
                   int64_t end, float* scores, int64_t scores_stride, float* scratch) {
  IndexerScoresImpl<Avx2Ops>(queries, keys, fp8, begin, end, scores, scores_stride, scratch);
}

void Attention(const AttentionQueries& queries, const PagedRows& k, const PagedRows& v,
               const int32_t* positions, const AttentionShape& shape, float* scratch) {
  AttentionImpl<Avx2Ops>(queries, k, v, positions, shape, scratch);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);  // xor = exact -g
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 d = _mm256_add_ps(one, Exp8(_mm256_xor_ps(g, sign)));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, d), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = SiluMulInline(gate[i], up[i]);
}

float DotEntry(const float* a, const float* b, int64_t n) { return Dot(a, b, n); }
void AxpyEntry(float a, const float* x, float* y, int64_t n) { Axpy(a, x, y, n); }

}  // namespace

const KernelTable& Avx2Table() {
  static const KernelTable table{&MatMulRows, &ymm::QuantizeActs, &qgemm::MatMulRowsQ<qgemm::Ymm, 4>, &DotEntry, &AxpyEntry, &SiluMul, &IndexerScores, &SelectTopKRadix, &Attention};
  return table;
}

}  // namespace tandem::kernels
