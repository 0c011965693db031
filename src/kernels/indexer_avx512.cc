// The lightning indexer's scores on AVX-512, tiled over query rows: keys are
// decoded to fp32 sixteen at a time (once for every query of the call, not
// once per query), and each query's per-head dots with the keys come from
// register tiles of 16 dot products reduced together (Reduce16). Per score
// the operations and their order are indexer_impl.h's: the canonical dot per
// head, times the key's scale for fp8, then heads summed in order with
// fma(w, max(d, 0), acc) from +0. So the result is bit for bit the
// query-at-a-time one, for any number of queries per call.
#include <algorithm>

#include "kernels/avx512_inline.h"

namespace tandem::kernels::avx512 {
namespace {

constexpr int kKeyBlock = 16;
constexpr int kMaxHeads = 64;

// 16 e4m3 bytes to their exact fp32 values, with integer operations only.
inline __m512 DecodeFp8x16(const uint8_t* p) {
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x80)), 24);
  const __m512i e = _mm512_and_si512(_mm512_srli_epi32(x, 3), _mm512_set1_epi32(0xf));
  const __m512i m = _mm512_and_si512(x, _mm512_set1_epi32(7));
  const __m512i normal = _mm512_or_si512(
      _mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23), _mm512_slli_epi32(m, 20));
  // Subnormals: m * 2^-9, exact.
  const __m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(0x1.0p-9f)));
  __m512i bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), normal, sub);
  const __mmask16 nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7f)),
                                                _mm512_set1_epi32(0x7f));
  bits = _mm512_mask_blend_epi32(nan, bits, _mm512_set1_epi32(0x7fc00000));
  return _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
}

// Keys [p0, p0 + count) as fp32 rows of `dims` (and their scales); slots past
// count repeat the last key so a tile can read them (their results are dropped).
void DecodeKeys(const PagedRows& keys, bool fp8, int64_t p0, int count, int64_t dims, float* out,
                float* scales) {
  for (int c = 0; c < kKeyBlock; ++c) {
    const int64_t pos = p0 + std::min(c, count - 1);
    const uint8_t* row = keys.RowBytes(pos);
    float* dst = out + c * dims;
    for (int64_t d = 0; d < dims; d += kLanes) {
      __m512 v;
      if (fp8) {
        v = DecodeFp8x16(row + d);
      } else {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d));
        v = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
      }
      _mm512_storeu_ps(dst + d, v);
    }
    scales[c] = fp8 ? *keys.Scale(pos) : 1.0f;
  }
}

// Dot products of kQueries query vectors with kCols = 16 / kQueries keys,
// returned with lane q * kCols + c holding query q's dot with key c.
template <int kQueries>
inline __m512 DotTile(const float* const* q, const float* keys, int64_t dims) {
  constexpr int kCols = 16 / kQueries;
  __m512 acc[16];  // acc[c * kQueries + r]
  for (int a = 0; a < 16; ++a) acc[a] = _mm512_setzero_ps();
  for (int64_t d = 0; d < dims; d += kLanes) {
    __m512 qv[kQueries];
    for (int r = 0; r < kQueries; ++r) qv[r] = _mm512_loadu_ps(q[r] + d);
    for (int c = 0; c < kCols; ++c) {
      const __m512 kv = _mm512_loadu_ps(keys + c * dims + d);
      for (int r = 0; r < kQueries; ++r) acc[c * kQueries + r] = _mm512_fmadd_ps(qv[r], kv, acc[c * kQueries + r]);
    }
  }
  // Reduce16 puts Reduce(acc[a]) in lane 4 (a % 4) + a / 4; gather it to
  // lane r * kCols + c for a = c * kQueries + r.
  alignas(64) static constexpr auto kOrder = [] {
    struct { int32_t v[16]; } o{};
    for (int r = 0; r < kQueries; ++r)
      for (int c = 0; c < kCols; ++c) {
        const int a = c * kQueries + r;
        o.v[r * kCols + c] = 4 * (a % 4) + a / 4;
      }
    return o;
  }();
  return _mm512_permutexvar_ps(_mm512_load_si512(kOrder.v), Reduce16(acc));
}

// Tiles of kQueries queries x (16 / kQueries) keys; for each tile the heads
// run in order, so every score is fma(w_h, max(d_h, 0), acc) over h from +0
// in one vector (max(d, 0) = d > 0 ? d : 0, NaN and -0 included).
template <int kQueries>
void Scores(const IndexerQueries& queries, const PagedRows& keys, bool fp8, int64_t begin,
            int64_t end, float* scores, int64_t scores_stride, float* scratch) {
  constexpr int kCols = 16 / kQueries;
  const int64_t dims = queries.dims;
  const int heads = queries.n_heads;
  float* key_rows = scratch;
  float* scales = key_rows + kKeyBlock * dims;
  for (int64_t p0 = begin; p0 < end; p0 += kKeyBlock) {
    const int count = int(std::min<int64_t>(kKeyBlock, end - p0));
    DecodeKeys(keys, fp8, p0, count, dims, key_rows, scales);
    for (int q0 = 0; q0 < queries.n; q0 += kQueries) {
      const int real = std::min(kQueries, queries.n - q0);  // the rest repeat query q0
      alignas(64) float w_lanes[kMaxHeads][16];
      const float* q[kMaxHeads][kQueries];
      for (int h = 0; h < heads; ++h) {
        for (int r = 0; r < kQueries; ++r) {
          const int qi = q0 + (r < real ? r : 0);
          q[h][r] = queries.q + qi * queries.q_stride + int64_t(h) * dims;
          for (int c = 0; c < kCols; ++c) w_lanes[h][r * kCols + c] = queries.w[qi * queries.w_stride + h];
        }
      }
      for (int c0 = 0; c0 < count; c0 += kCols) {
        __m512 scale = _mm512_set1_ps(1.0f);
        if (fp8) {
          alignas(64) float s[16];
          for (int l = 0; l < 16; ++l) s[l] = scales[c0 + l % kCols];
          scale = _mm512_load_ps(s);
        }
        __m512 acc = _mm512_setzero_ps();
        for (int h = 0; h < heads; ++h) {
          __m512 d = DotTile<kQueries>(q[h], key_rows + c0 * dims, dims);
          if (fp8) d = _mm512_mul_ps(d, scale);
          acc = _mm512_fmadd_ps(_mm512_load_ps(w_lanes[h]), _mm512_max_ps(d, _mm512_setzero_ps()), acc);
        }
        alignas(64) float out[16];
        _mm512_store_ps(out, acc);
        const int cols = std::min(kCols, count - c0);
        for (int r = 0; r < real; ++r) {
          std::copy(out + r * kCols, out + r * kCols + cols,
                    scores + (q0 + r) * scores_stride + (p0 + c0 - begin));
        }
      }
    }
  }
}

}  // namespace

bool IndexerTiled(const IndexerQueries& queries, const PagedRows& keys, bool fp8, int64_t begin,
                  int64_t end, float* scores, int64_t scores_stride, float* scratch) {
  if (queries.dims % kLanes != 0 || queries.n_heads < 1 || queries.n_heads > kMaxHeads) return false;
  if (queries.n >= 4) {
    Scores<4>(queries, keys, fp8, begin, end, scores, scores_stride, scratch);
  } else if (queries.n >= 2) {
    Scores<2>(queries, keys, fp8, begin, end, scores, scores_stride, scratch);
  } else {
    Scores<1>(queries, keys, fp8, begin, end, scores, scores_stride, scratch);
  }
  return true;
}

}  // namespace tandem::kernels::avx512
