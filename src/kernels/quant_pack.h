// Block-quantized weights repacked for the SIMD integer kernels: sixteen rows
// interleaved, so one vector holds four consecutive elements of each of 16
// rows (the operand of vpdpbusd, or of vpmaddubsw + vpmaddwd on 8 rows) and a
// token's four activations are broadcast against it. Each output row is then
// one vector lane: no sum across a vector, ever (quant_dot.h, numerics 3).
//
// A matrix of R rows is ceil(R / 16) groups (rows past R are zero); group g
// holds the row's blocks in order, record (g * blocks + b) of RecordBytes.
// The vectors of a record (64 bytes; byte 4r + c is row r's element c of
// a run of four):
//   NV_h   a "nibble vector" of a 32-element run: low nibble = element 4h + c,
//          high nibble = element 16 + 4h + c (h < 4), the 4-bit codes
//   W_h    Q8_0's bytes of elements 4h + c, as stored (int8)
//   HB     a bit vector of a 32-element run: bit h = bit 4 (value 16) of
//          element 4h + c (Q5_0, Q5_K)
//   H2_s   Q6_K's high bits of a 32-element run: bits [2i, 2i + 2) = bits 4-5
//          of element 4 (4s + i) + c (s < 2)
// and per-row arrays, row r at index r:
//   Q4_0  NV_0..3 | d f16[16]                                            288 bytes
//   Q5_0  NV_0..3 | HB | d f16[16]                                        352
//   Q8_0  W_0..7 | d f16[16]                                              544
//   Q4_K  runs j < 8: NV_0..3 | sc u8[8][16] | m u8[8][16] | d | dmin      2368
//   Q5_K  as Q4_K, with HB of runs j < 8 after the nibbles                2880
//   Q6_K  runs u < 8: NV_0..3 (low 4 bits) | runs u < 8: H2_0, H2_1 |
//         sc int8[8][16][2] (groups 2u, 2u+1 of row r at 32u + 2r) | d    3360
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/kernel_table.h"

namespace tandem::kernels {

constexpr int kPackRows = 16;

// Bytes of one record (one block of 16 rows); 0 for types that are not packed.
constexpr int PackedRecordBytes(WeightType type) {
  switch (type) {
    case WeightType::kQ4_0: return 288;
    case WeightType::kQ5_0: return 352;
    case WeightType::kQ8_0: return 544;
    case WeightType::kQ4_K: return 2368;
    case WeightType::kQ5_K: return 2880;
    case WeightType::kQ6_K: return 3360;
    default: return 0;
  }
}

// Offsets within a record.
struct PackedOffsets {
  int hb = 0, scales = 0, mins = 0, d = 0, dmin = 0;
};

constexpr PackedOffsets PackedOffsetsOf(WeightType type) {
  switch (type) {
    case WeightType::kQ4_0: return {0, 0, 0, 256, 0};
    case WeightType::kQ5_0: return {256, 0, 0, 320, 0};
    case WeightType::kQ8_0: return {0, 0, 0, 512, 0};
    case WeightType::kQ4_K: return {0, 2048, 2176, 2304, 2336};
    case WeightType::kQ5_K: return {2048, 2560, 2688, 2816, 2848};
    case WeightType::kQ6_K: return {2048, 3072, 0, 3328, 0};  // hb: the H2 vectors
    default: return {};
  }
}

// The packed bytes of a rows x cols matrix of `type`.
inline size_t PackedBytes(WeightType type, int64_t rows, int64_t cols, int block) {
  return size_t((rows + kPackRows - 1) / kPackRows) * size_t(cols / block) * size_t(PackedRecordBytes(type));
}

// Packs rows [r0, r1) of w (r0 % 16 == 0) into out, which holds
// PackedBytes(w.type, r1 - r0, w.cols, block) bytes: groups of 16 from r0.
void PackRows(const WeightMatrix& w, int64_t r0, int64_t r1, uint8_t* out);

// An owned packing of a whole matrix (64-byte aligned); data() goes to
// WeightMatrix::packed.
class PackedWeights {
 public:
  PackedWeights() = default;
  // Empty (size() 0) for types that are not packed; data() null with size()
  // not 0 when the allocation failed. `fill` false: the bytes are allocated,
  // not written (PackRows(w, 0, w.rows, data()) writes them).
  explicit PackedWeights(const WeightMatrix& w, bool fill = true);
  const uint8_t* data() const { return bytes_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> bytes_;
  size_t size_ = 0;
};

}  // namespace tandem::kernels
