// Integer dot products of block-quantized weights (THE canonical order for
// Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K; invariant 5).
//
// 1. Each token's activations are quantized once per matrix input, in blocks
//    of 32 (for Q8_0, Q4_0, Q5_0) or 256 (for the K-quants) elements:
//      amax = max |x_k| over the block (NaNs ignored)
//      d    = amax / 127                 (fp32 division; d = 0 when amax is 0)
//      id   = d >= FLT_MIN ? 1 / d : 0     (a subnormal d: all a_k = 0)
//      v_k  = x_k * id (fp32), NaN -> 0, clamped to [-127, 127]
//      a_k  = v_k rounded to nearest, ties to even (int8)
//    with the integer sum of every 16 a_k beside them.
// 2. Each weight block b against its activations gives exact integers (an
//    integer sum does not depend on its order, so every ISA gets them):
//      Q8_0  T = sum w_k a_k
//      Q4_0  T = sum (q_k - 8) a_k             (q_k the 4-bit value)
//      Q5_0  T = sum (q_k - 16) a_k            (q_k the 5-bit value)
//      Q4_K  T = sum_j sc_j sum_{k in j} q_k a_k    (j: the 8 sub-blocks of 32)
//            M = sum_j m_j A_j                       (A_j: sub-block j's sum of a_k)
//      Q5_K  as Q4_K with 5-bit q_k
//      Q6_K  T = sum_g sc_g sum_{k in g} (q_k - 32) a_k   (g: the 16 groups of 16)
// 3. An output element is one fp32 accumulator, +0 at first; over the row's
//    blocks in order (FMAs):
//      acc = fma(float(T), d * da, acc)
//      acc = fma(float(M), -(dmin * da), acc)    (Q4_K and Q5_K only)
//    with d, dmin the block's fp16 scales and da the activation block's scale.
//    (Numerics version 3: no lanes, so a kernel may hold sixteen rows of one
//    token in a vector, row-interleaved weights (quant_pack.h), and never sum
//    across a vector.)
// Only the row and the token's activations decide the result: not the ISA,
// how rows are split between threads, or how many tokens share a call.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/aligned.h"
#include "kernels/kernel_table.h"
#include "kernels/quant_blocks.h"
#include "kernels/weight_row.h"

namespace tandem::kernels {

// Which weight types the forward pass multiplies by integer dot products:
// every block-quantized one.
constexpr bool UsesIntegerDot(WeightType type) {
  return type == WeightType::kQ8_0 || type == WeightType::kQ4_0 || type == WeightType::kQ5_0 ||
         type == WeightType::kQ4_K || type == WeightType::kQ5_K || type == WeightType::kQ6_K;
}

// The activation block of a type's integer dot products: 32 or 256 (0 for
// the float types).
constexpr int ActBlockFor(WeightType type) {
  switch (type) {
    case WeightType::kQ8_0:
    case WeightType::kQ4_0:
    case WeightType::kQ5_0: return 32;
    case WeightType::kQ4_K:
    case WeightType::kQ5_K:
    case WeightType::kQ6_K: return kSuperBlock;
    default: return 0;
  }
}

constexpr int WeightBlockBytes(WeightType type) {
  switch (type) {
    case WeightType::kQ8_0: return kQ8BlockBytes;
    case WeightType::kQ4_0: return kQ4_0BlockBytes;
    case WeightType::kQ5_0: return kQ5_0BlockBytes;
    case WeightType::kQ4_K: return kQ4KBlockBytes;
    case WeightType::kQ5_K: return kQ5KBlockBytes;
    case WeightType::kQ6_K: return kQ6KBlockBytes;
    default: return 0;
  }
}

// Step 1 for one block of `block` elements (the reference; SIMD paths give
// the same bytes).
inline void QuantizeActBlock(const float* x, int block, int8_t* q, float* d, int16_t* sums) {
  float amax = 0.0f;
  for (int k = 0; k < block; ++k) {
    const float v = std::fabs(x[k]);
    amax = v > amax ? v : amax;
  }
  const float dd = amax / 127.0f;
  const float id = dd >= FLT_MIN ? 1.0f / dd : 0.0f;
  *d = dd;
  for (int k = 0; k < block; ++k) {
    float v = x[k] * id;
    v = v == v ? v : 0.0f;
    v = v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v;
    q[k] = int8_t(std::nearbyint(v));
  }
  for (int g = 0; g < block / 16; ++g) {
    int s = 0;
    for (int k = 0; k < 16; ++k) s += q[16 * g + k];
    sums[g] = int16_t(s);
  }
}

// The six-bit scales and mins of a Q4_K/Q5_K super-block's 12 bytes, as
// bytes: out[0, 8) the scales, out[8, 16) the mins (ScaleMinK4's values).
inline void ScalesMinsK4(const uint8_t* s, uint8_t* out) {
  uint32_t w0, w1, w2;
  std::memcpy(&w0, s, 4);
  std::memcpy(&w1, s + 4, 4);
  std::memcpy(&w2, s + 8, 4);
  const uint32_t sc_lo = w0 & 0x3f3f3f3fu, m_lo = w1 & 0x3f3f3f3fu;
  const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | ((w0 >> 6) & 0x03030303u) << 4;
  const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 6) & 0x03030303u) << 4;
  std::memcpy(out, &sc_lo, 4);
  std::memcpy(out + 4, &sc_hi, 4);
  std::memcpy(out + 8, &m_lo, 4);
  std::memcpy(out + 12, &m_hi, 4);
}

// A block's exact integers (step 2): m only for Q4_K and Q5_K.
struct BlockInts {
  int32_t t = 0, m = 0;
};

// Step 2, the reference: block `b` of a row against its activations `a`
// (its elements) and their per-16 sums.
inline BlockInts BlockDot(WeightType type, const uint8_t* b, const int8_t* a, const int16_t* sums) {
  BlockInts r;
  switch (type) {
    case WeightType::kQ8_0:
      for (int k = 0; k < 32; ++k) r.t += int32_t(int8_t(b[2 + k])) * a[k];
      break;
    case WeightType::kQ4_0:
    case WeightType::kQ5_0: {
      const bool five = type == WeightType::kQ5_0;
      const uint32_t qh = five ? uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24 : 0;
      const uint8_t* qs = b + (five ? 6 : 2);
      for (int k = 0; k < 32; ++k) {
        int q = k < 16 ? qs[k] & 0xf : qs[k - 16] >> 4;
        if (five) q |= int((qh >> k) & 1) << 4;
        r.t += (q - (five ? 16 : 8)) * a[k];
      }
      break;
    }
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: {
      const bool five = type == WeightType::kQ5_K;
      uint8_t sm[16];
      ScalesMinsK4(b + 4, sm);
      const uint8_t* qs = b + 16 + (five ? 32 : 0);
      for (int j = 0; j < 8; ++j) {
        int32_t s = 0;
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * (j / 2) + l];
          int q = j % 2 == 0 ? byte & 0xf : byte >> 4;
          if (five) q += ((b[16 + l] >> j) & 1) * 16;
          s += q * a[32 * j + l];
        }
        r.t += int32_t(sm[j]) * s;
        r.m += int32_t(sm[8 + j]) * (sums[2 * j] + sums[2 * j + 1]);
      }
      break;
    }
    case WeightType::kQ6_K:
      for (int g = 0; g < 16; ++g) {
        int32_t s = 0;
        for (int k = 16 * g; k < 16 * g + 16; ++k) {
          const int half = k / 128, quarter = (k % 128) / 32, l = k % 32;
          const uint8_t ql = b[half * 64 + l + (quarter & 1) * 32];
          const uint8_t qh = b[128 + half * 32 + l];
          const int q = (quarter < 2 ? ql & 0xf : ql >> 4) | ((qh >> (2 * quarter)) & 3) << 4;
          s += (q - 32) * a[k];
        }
        r.t += int32_t(int8_t(b[192 + g])) * s;
      }
      break;
    default: break;
  }
  return r;
}

// The block's fp16 scale d and (Q4_K, Q5_K) min scale dmin, as fp32 (exact).
struct BlockHalves {
  float d = 0, dmin = 0;
};

inline BlockHalves BlockHalvesOf(WeightType type, const uint8_t* b) {
  switch (type) {
    case WeightType::kQ4_K:
    case WeightType::kQ5_K: return {HalfAt(b), HalfAt(b + 2)};
    case WeightType::kQ6_K: return {HalfAt(b + 208), 0.0f};
    default: return {HalfAt(b), 0.0f};
  }
}

constexpr bool HasMins(WeightType type) { return type == WeightType::kQ4_K || type == WeightType::kQ5_K; }

// Step 3 for one block.
inline float FoldBlock(WeightType type, BlockHalves h, float da, BlockInts v, float acc) {
  acc = std::fma(float(v.t), h.d * da, acc);
  if (HasMins(type)) acc = std::fma(float(v.m), -(h.dmin * da), acc);
  return acc;
}

// One output element by the reference steps 2 and 3.
inline float QuantRowDot(WeightType type, const uint8_t* row, int64_t cols, const int8_t* a, const float* da,
                         const int16_t* sums) {
  const int block = ActBlockFor(type), bytes = WeightBlockBytes(type);
  float acc = 0.0f;
  for (int64_t b = 0; b < cols / block; ++b) {
    const uint8_t* wb = row + b * bytes;
    acc = FoldBlock(type, BlockHalvesOf(type, wb), da[b], BlockDot(type, wb, a + b * block, sums + b * (block / 16)),
                    acc);
  }
  return acc;
}

// Storage for quantized activations of up to n tokens of `cols`.
struct ActStorage {
  std::vector<int8_t, AlignedAllocator<int8_t>> q;
  std::vector<float> d;
  std::vector<int16_t, AlignedAllocator<int16_t>> sums;

  // Grows the storage for n tokens and returns its view (not yet written).
  // Defined in quant_pack.cc, compiled for the baseline ISA: the ISA files
  // that call it must not lend it their instructions (one copy of an inline
  // function serves every file that uses it).
  QuantizedActs Reserve(int n, int64_t cols, int block);
};

namespace {  // NOLINT: one copy per ISA's file, built with that file's flags

// matmul_rows of a block-quantized W through the integer kernel: the
// activations are quantized into this thread's storage first.
template <class Table>
void MatMulRowsViaActs(const Table& table, const WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens,
                       float* y, int64_t y_stride, int64_t r0, int64_t r1) {
  thread_local ActStorage storage;
  QuantizedActs acts = storage.Reserve(n_tokens, w.cols, ActBlockFor(w.type));
  table.quantize_acts(x, x_stride, n_tokens, w.cols, acts.block, const_cast<int8_t*>(acts.q),
                      const_cast<float*>(acts.d), const_cast<int16_t*>(acts.sums));
  table.matmul_rows_q(w, acts, n_tokens, y, y_stride, r0, r1);
}

}  // namespace

}  // namespace tandem::kernels
