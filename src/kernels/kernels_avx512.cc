// AVX-512 kernels in the canonical order (kernel_table.h): one zmm register
// holds the 16 lanes of one output element's accumulator.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/attention_impl.h"
#include "kernels/indexer_impl.h"
#include "common/aligned.h"
#include "common/fp8.h"
#include "kernels/exp_inline.h"
#include "kernels/quant_dot_ymm.h"
#include "kernels/quant_gemm.h"
#include "kernels/quant_gemm_vnni.h"
#include "kernels/weight_row.h"
#include "kernels/avx512_inline.h"

namespace tandem::kernels {
namespace {

using avx512::Exp16;
using avx512::Load16;
using avx512::Reduce;

// A tile of kRows output rows times kTokens tokens; each (row, token) owns one accumulator.
template <WeightType kType, int kRows, int kTokens>
void Tile(const WeightMatrix& w, const float* x, int64_t x_stride, float* y, int64_t y_stride,
          int64_t r, int t) {
  __m512 acc[kRows][kTokens];
  for (int i = 0; i < kRows; ++i)
    for (int j = 0; j < kTokens; ++j) acc[i][j] = _mm512_setzero_ps();
  const uint8_t* rows[kRows];
  for (int i = 0; i < kRows; ++i) rows[i] = w.data + (r + i) * w.row_bytes;
  const float* xs[kTokens];
  for (int j = 0; j < kTokens; ++j) xs[j] = x + (t + j) * x_stride;
  const int64_t n = w.cols;
  const int64_t full = n / kLanes * kLanes;
  // Decode streams each weight once: prefetch the next row block while this one computes.
  const uint8_t* ahead = w.data + (r + kRows) * w.row_bytes;
  // (F32 rows stream well on their own; measured slower with the extra instructions.)
  const bool prefetch = kType != WeightType::kF32 && kTokens == 1 && r + 2 * kRows <= w.rows;
  const int64_t bytes_per_step = int64_t(w.row_bytes) * kLanes / n;
  for (int64_t k = 0; k < full; k += kLanes) {
    if (prefetch) {
      for (int i = 0; i < kRows; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + i * w.row_bytes + k / kLanes * bytes_per_step), _MM_HINT_T0);
    }
    __m512 wv[kRows];
    for (int i = 0; i < kRows; ++i) wv[i] = Load16<kType>(rows[i], k);
    for (int j = 0; j < kTokens; ++j) {
      const __m512 xv = _mm512_loadu_ps(xs[j] + k);
      for (int i = 0; i < kRows; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  if (full < n) {
    alignas(64) float wt[kLanes], xt[kLanes];
    for (int i = 0; i < kRows; ++i) {
      for (int j = 0; j < kTokens; ++j) {
        LoadTail(kType, rows[i], xs[j], full, n, wt, xt);
        acc[i][j] = _mm512_fmadd_ps(_mm512_load_ps(wt), _mm512_load_ps(xt), acc[i][j]);
      }
    }
  }
  if constexpr (kRows == 4 && kTokens % 2 == 0) {
    for (int j = 0; j < kTokens; j += 2) {  // tokens j and j + 1, rows r .. r + 3 of each
      const __m512 pair[8] = {acc[0][j],     acc[1][j],     acc[2][j],     acc[3][j],
                              acc[0][j + 1], acc[1][j + 1], acc[2][j + 1], acc[3][j + 1]};
      const __m256 sums = avx512::Reduce8(pair);
      _mm_storeu_ps(y + (t + j) * y_stride + r, _mm256_castps256_ps128(sums));
      _mm_storeu_ps(y + (t + j + 1) * y_stride + r, _mm256_extractf128_ps(sums, 1));
    }
  } else {
    for (int i = 0; i < kRows; ++i)
      for (int j = 0; j < kTokens; ++j) y[(t + j) * y_stride + r + i] = Reduce(acc[i][j]);
  }
}

// Tiles of kRows rows x kTokens tokens over the whole kRows-row blocks of
// [r0, r1) and the tokens [0, n_tokens) (the last ones in 4- and 1-token
// tiles), each group of tokens passing over every row block in turn.
template <WeightType kType, int kRows, int kTokens>
void Tiles(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y, int64_t y_stride,
           int64_t r0, int64_t r1) {
  int t = 0;
  auto rows = [&]<int kT>() {
    for (int64_t r = r0; r + kRows <= r1; r += kRows) Tile<kType, kRows, kT>(w, x, x_stride, y, y_stride, r, t);
  };
  for (; t + kTokens <= n_tokens; t += kTokens) rows.template operator()<kTokens>();
  if constexpr (kTokens > 4) {
    for (; t + 4 <= n_tokens; t += 4) rows.template operator()<4>();
  }
  for (; t < n_tokens; ++t) rows.template operator()<1>();
}

// Several tokens (prefill): register tiles of 4 rows x 6 tokens (24
// accumulators + 4 weight vectors + 1 activation vector = 29 of the 32 zmm
// registers), each pair of tokens' 8 sums reduced together (Reduce8) and
// stored as two 4-row vectors. Measured (tandem_microbench and bench model,
// small preset, 64-byte aligned operands): the 6 x 4 tiles with a Reduce()
// per output were 5-10% slower on 384-wide rows, the same on 1024-wide ones.
//
// Each output is one tile's, whatever order the tiles run in, so the order
// is chosen for the caches alone. Where six tokens' activations fit in L1
// (rows up to 1,024 wide), tokens go in blocks of 64 and a block of rows that
// fits in L2 is held there while each group of six tokens passes over it: a
// tile reads its activations from L1 and only its 4 weight rows from L2.
// Longer rows (the FFN's down projection) keep each 4-row block in L1 while
// a block of 12 tokens streams past it from L2. Measured against one order
// for all (4-row blocks, 64-token blocks), F16 at 512 tokens, 100m preset, 2
// threads: 3,072-wide rows alone 156-159 against 168-179 GFLOP/s (microbench,
// one thread); the whole prefill 1,393 against 1,442 tok/s (L1 order), then
// 1,482 (12-token blocks), medians of 8 interleaved runs.
constexpr int kTokenBlock = 64;
constexpr int kLongRowTokenBlock = 12;
constexpr int64_t kL1Activations = 24 << 10;  // bytes: six tokens' rows, with room for the weights passing
constexpr int64_t kL2Rows = 256 << 10;        // bytes: the rows held in L2 while the tokens pass

template <WeightType kType>
void MatMulTokens(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
                  int64_t y_stride, int64_t r0, int64_t r1) {
  constexpr int kRows = 4, kTokens = 6;
  const bool activations_in_l1 = kTokens * w.cols * int64_t(sizeof(float)) <= kL1Activations;
  // Rows passed over by each group of tokens: an L2-sized block, or one 4-row block.
  const int64_t held =
      activations_in_l1 ? std::max<int64_t>(kRows, kL2Rows / int64_t(w.row_bytes) / kRows * kRows) : kRows;
  const int token_block = activations_in_l1 ? kTokenBlock : kLongRowTokenBlock;
  const int64_t full = r0 + (r1 - r0) / kRows * kRows;
  for (int t = 0; t < n_tokens; t += token_block) {
    const int nt = std::min(token_block, n_tokens - t);
    const float* xt = x + t * x_stride;
    float* yt = y + t * y_stride;
    for (int64_t r = r0; r < full; r += held) {
      Tiles<kType, kRows, kTokens>(w, xt, x_stride, nt, yt, y_stride, r, std::min(full, r + held));
    }
    Tiles<kType, 1, 4>(w, xt, x_stride, nt, yt, y_stride, full, r1);
  }
}

template <WeightType kType>
void MatMulTyped(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
                 int64_t y_stride, int64_t r0, int64_t r1) {
  if (n_tokens < 1) return;
  if (n_tokens >= 4) return MatMulTokens<kType>(w, x, x_stride, n_tokens, y, y_stride, r0, r1);
  int64_t r = r0;
  if (n_tokens == 1) {
    for (; r + 8 <= r1; r += 8) Tile<kType, 8, 1>(w, x, x_stride, y, y_stride, r, 0);
  }
  const int64_t full = r + (r1 - r) / 4 * 4;
  Tiles<kType, 4, 4>(w, x, x_stride, n_tokens, y, y_stride, r, full);
  Tiles<kType, 1, 4>(w, x, x_stride, n_tokens, y, y_stride, full, r1);
}

// The integer kernels: vpdpbusd where the CPU has AVX-512 VNNI, else the
// AVX2 kernels' vpmaddubsw + vpmaddwd (the same integers, so the same bits).
void MatMulRowsQ(const WeightMatrix& w, const QuantizedActs& x, int n_tokens, float* y, int64_t y_stride,
                 int64_t r0, int64_t r1) {
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  if (vnni) return MatMulRowsQVnni(w, x, n_tokens, y, y_stride, r0, r1);
  qgemm::MatMulRowsQ<qgemm::Ymm, 4>(w, x, n_tokens, y, y_stride, r0, r1);
}

void MatMulRows(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
                int64_t y_stride, int64_t r0, int64_t r1) {
  if (UsesIntegerDot(w.type)) return MatMulRowsViaActs(Avx512Table(), w, x, x_stride, n_tokens, y, y_stride, r0, r1);
  switch (w.type) {
    case WeightType::kF32: return MatMulTyped<WeightType::kF32>(w, x, x_stride, n_tokens, y, y_stride, r0, r1);
    case WeightType::kF16: return MatMulTyped<WeightType::kF16>(w, x, x_stride, n_tokens, y, y_stride, r0, r1);
    case WeightType::kBF16: return MatMulTyped<WeightType::kBF16>(w, x, x_stride, n_tokens, y, y_stride, r0, r1);
    default: return MatMulRowsViaActs(Avx512Table(), w, x, x_stride, n_tokens, y, y_stride, r0, r1);
  }
}

inline float Dot(const float* a, const float* b, int64_t n) {
  __m512 acc = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), acc);
  }
  if (k < n) {  // zero-padded lanes: fma(0, 0, acc), exactly as the scalar path pads
    const __mmask16 m = __mmask16((1u << (n - k)) - 1);
    acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, b + k), acc);
  }
  return Reduce(acc);
}

inline void Axpy(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  }
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i),
                                                   _mm512_maskz_loadu_ps(m, y + i)));
  }
}

struct Avx512Ops {
  static void DecodeFp8(const uint8_t* q, int64_t n, float* out) {
    const float* table = Fp8E4M3Table();
    for (int64_t i = 0; i < n; ++i) out[i] = table[q[i]];
  }
  static float Dot(const float* a, const float* b, int64_t n) { return kernels::Dot(a, b, n); }
  static void Axpy(float a, const float* x, float* y, int64_t n) { kernels::Axpy(a, x, y, n); }
  static void ExpMinus(float* x, int64_t n, float m) {
    const __m512 mv = _mm512_set1_ps(m);
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      _mm512_storeu_ps(x + i, Exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv)));
    }
    for (; i < n; ++i) x[i] = ExpInline(x[i] - m);
  }
};

void IndexerScores(const IndexerQueries& queries, const PagedRows& keys, bool fp8, int64_t begin,
                   int64_t end, float* scores, int64_t scores_stride, float* scratch) {
  if (avx512::IndexerTiled(queries, keys, fp8, begin, end, scores, scores_stride, scratch)) return;
  IndexerScoresImpl<Avx512Ops>(queries, keys, fp8, begin, end, scores, scores_stride, scratch);
}

void Attention(const AttentionQueries& queries, const PagedRows& k, const PagedRows& v,
               const int32_t* positions, const AttentionShape& shape, float* scratch) {
  if (avx512::AttentionTiled(queries, k, v, positions, shape, scratch)) return;
  AttentionImpl<Avx512Ops>(queries, k, v, positions, shape, scratch);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);  // xor = exact -g
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 d = _mm512_add_ps(one, Exp16(_mm512_xor_ps(g, sign)));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, d), _mm512_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = SiluMulInline(gate[i], up[i]);
}

float DotEntry(const float* a, const float* b, int64_t n) { return Dot(a, b, n); }
void AxpyEntry(float a, const float* x, float* y, int64_t n) { Axpy(a, x, y, n); }

}  // namespace

const KernelTable& Avx512Table() {
  static const KernelTable table{&MatMulRows, &ymm::QuantizeActs, &MatMulRowsQ, &DotEntry, &AxpyEntry, &SiluMul, &IndexerScores, &avx512::SelectTopK, &Attention};
  return table;
}

}  // namespace tandem::kernels
