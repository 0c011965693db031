// The per-ISA kernel entry points and THE canonical reduction order.
//
// Canonical order (invariant 5): a dot product of length n is computed in 16
// lanes; lane j accumulates elements k with k % 16 == j, in increasing k, each
// step one fused multiply-add starting from +0. Elements past n are padded
// with zeros (and still FMA'd, so signed zeros behave identically). The 16
// lanes are then summed pairwise: lane i += lane i+8, then i += i+4, i += i+2,
// i += i+1. Every ISA implements exactly this order, so scalar, AVX2 and
// AVX-512 produce the same bits, and the result for one output element does
// not depend on how many rows or tokens share the call.
//
// 16-bit weights are first converted to fp32 (exactly). Block-quantized
// weights (Q8_0, Q4_0, Q5_0 and the K-quants) are not: they multiply 8-bit
// activations in integers, in quant_dot.h's order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem::kernels {

enum class WeightType { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ5_0, kQ4_K, kQ5_K, kQ6_K };

// A row-major weight matrix: `rows` rows of `cols` elements, each row
// `row_bytes` bytes. Used as y = W x (one output per row).
struct WeightMatrix {
  WeightType type = WeightType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  // Block-quantized types: the rows repacked for the SIMD integer kernels
  // (quant_pack.h), or null (those kernels then pack the rows they need per call).
  const uint8_t* packed = nullptr;
};

constexpr int kLanes = 16;

// Locates the cache row of a position in a paged buffer of one layer:
// base + pages[pos / page_tokens] * page_stride + (pos % page_tokens) * row_bytes.
struct PagedRows {
  uint8_t* base = nullptr;
  const int32_t* pages = nullptr;
  int64_t page_stride = 0;
  int64_t row_bytes = 0;
  int page_tokens = 0;
  // Where per-token fp32 scales start within a page (after all rows); -1 if none.
  int64_t scale_offset = -1;
  // Every page pool has 64-token pages (cache/layout.h): that case takes a
  // shift and a mask, not a 64-bit division per row (gathers do millions).
  int64_t PageOf(int64_t pos) const { return page_tokens == 64 ? pos >> 6 : pos / page_tokens; }
  int64_t SlotOf(int64_t pos) const { return page_tokens == 64 ? pos & 63 : pos % page_tokens; }
  uint8_t* RowBytes(int64_t pos) const {
    return base + pages[PageOf(pos)] * page_stride + SlotOf(pos) * row_bytes;
  }
  float* Row(int64_t pos) const { return reinterpret_cast<float*>(RowBytes(pos)); }
  float* Scale(int64_t pos) const {
    return reinterpret_cast<float*>(base + pages[PageOf(pos)] * page_stride + scale_offset + SlotOf(pos) * 4);
  }
};

// How K and V rows are stored: fp32, or 16-bit (converted exactly to fp32 as
// they are read, so the arithmetic below is the same for every storage type).
enum class KvType : uint8_t { kF32, kF16, kBF16 };

inline int64_t KvTypeBytes(KvType t) { return t == KvType::kF32 ? 4 : 2; }

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0;  // usually 1/sqrt(head_dim)
  // Query heads [head_begin, head_end) are computed; the rest of out is untouched.
  int head_begin = 0;
  int head_end = -1;  // -1: n_heads
  KvType kv_type = KvType::kF32;
};

// Attention's canonical order (invariant 5), per query token and head. The
// query attends to a list of entries (cache positions in ascending order:
// 0, 1, 2, ... under dense attention, its top-k under sparse attention),
// taken in blocks of kAttentionBlock entries, block b holding entries
// [64b, 64b + 64) of the list:
//   m = -inf; l[16] = +0; o[head_dim] = +0
//   for each block:
//     s_j = dot(q, k_j) * scale         (the canonical dot above)
//     if max_j s_j > m: a = exp(m - max_j s_j); o *= a; l[*] *= a; m = max_j s_j
//     p_j = exp(s_j - m)                 (exp_inline.h)
//     l[e % 16] += p_j for each entry e, in entry order
//     o = fma(p_j, v_j, o) for each entry, in entry order
//   out = o * (1 / (l summed by the canonical 16-lane reduction))
// Only the query and the list decide the result, so it is the same however
// queries are grouped into calls, a prompt is chunked, or heads are split.
constexpr int kAttentionBlock = 64;

// Query tokens of one sequence that attend to the same entry list: query i
// attends to entries [0, n_entries[i]) of it.
struct AttentionQueries {
  const float* q = nullptr;  // query i: q + i * q_stride, n_heads x head_dim
  int64_t q_stride = 0;
  float* out = nullptr;  // query i: out + i * out_stride
  int64_t out_stride = 0;
  const int64_t* n_entries = nullptr;
  int n = 0;
};

// Query tokens' indexer inputs: query i has n_heads vectors of `dims` floats
// at q + i * q_stride and one weight per head at w + i * w_stride (w_stride
// 0: every query shares the weights).
struct IndexerQueries {
  const float* q = nullptr;
  int64_t q_stride = 0;
  const float* w = nullptr;
  int64_t w_stride = 0;
  int n_heads = 0;
  int64_t dims = 0;
  int n = 1;
};

// Scratch floats the indexer_scores kernel needs for n queries of `dims`.
inline int64_t IndexerScratchFloats(int n_queries, int64_t dims) {
  return 16 * (dims + 1) + 16 * int64_t(n_queries) + dims;
}

// Token rows of activations quantized for the integer dot products of
// block-quantized weights (quant_dot.h): token t's int8 values at
// q + t * cols, its scales (one per `block` elements) at d + t * (cols / block),
// and its sums of every 16 values at sums + t * (cols / 16).
struct QuantizedActs {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int16_t* sums = nullptr;
  int64_t cols = 0;
  int block = 0;  // 32 or 256: ActBlockFor(the weights' type)
};

struct KernelTable {
  // y[t * y_stride + r] = dot(W[r], x + t * x_stride) for r in [r0, r1), t in [0, n_tokens).
  // Float weights: the canonical order above; block-quantized ones: x's
  // quantization (quantize_acts), then matmul_rows_q.
  void (*matmul_rows)(const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens,
                      float* y, int64_t y_stride, int64_t r0, int64_t r1);
  // Quantizes token rows x + t * x_stride (cols % block == 0) into q, d and
  // sums laid out as QuantizedActs says (quant_dot.h, step 1).
  void (*quantize_acts)(const float* x, int64_t x_stride, int n_tokens, int64_t cols, int block, int8_t* q,
                        float* d, int16_t* sums);
  // matmul_rows of a block-quantized W over quantized activations
  // (x.block == ActBlockFor(w.type), x.cols == w.cols; quant_dot.h, steps 2-3).
  void (*matmul_rows_q)(const WeightMatrix& w, const QuantizedActs& x, int n_tokens, float* y, int64_t y_stride,
                        int64_t r0, int64_t r1);
  // Canonical dot product of two fp32 vectors.
  float (*dot)(const float* a, const float* b, int64_t n);
  // y[i] = fma(a, x[i], y[i]) for each i (element-wise, no reduction).
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // gate[i] = gate[i] / (1 + exp(-gate[i])) * up[i], exp as in exp_inline.h.
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  // Indexer scores of key positions [begin, end) for every query: query i's
  // score of pos goes to scores[i * scores_stride + pos - begin]. Each score
  // is the one of indexer_impl.h, however many queries share the call.
  // scratch: IndexerScratchFloats(queries.n, queries.dims) floats.
  void (*indexer_scores)(const IndexerQueries& queries, const PagedRows& keys, bool fp8,
                         int64_t begin, int64_t end, float* scores, int64_t scores_stride,
                         float* scratch);
  // Top-k selection; see kernels::SelectTopK in topk.h (every ISA selects
  // the same positions).
  int64_t (*select_topk)(float* scores, int64_t n, int64_t k, int32_t* out);
  // Attention of a group of query tokens; see kernels::Attention in ops.h.
  void (*attention)(const AttentionQueries& queries, const PagedRows& k, const PagedRows& v,
                    const int32_t* positions, const AttentionShape& shape, float* scratch);
};

const KernelTable& ScalarTable();
const KernelTable& Avx2Table();
const KernelTable& Avx512Table();

}  // namespace tandem::kernels
