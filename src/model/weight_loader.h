// Reads a model's tensors out of the mapped GGUF file for an architecture
// (model/arch/): each by name with its shape checked, matrices viewed in
// place (block-quantized ones also repacked for the integer kernels,
// kernels/quant_pack.h), vectors converted to fp32. Counts the matrix bytes
// it hands out, so a model knows what a decoded token reads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/kernel_table.h"
#include "kernels/quant_pack.h"
#include "model/gguf.h"

namespace tandem {

class WeightLoader {
 public:
  WeightLoader(const GgufFile& g, std::vector<std::shared_ptr<const kernels::PackedWeights>>* packed, bool pack)
      : g_(g), packed_(packed), pack_(pack) {}

  const GgufFile& gguf() const { return g_; }
  // Repacks a block-quantized matrix for the integer kernels: its bytes now,
  // written by PackAll.
  Status Pack(kernels::WeightMatrix* m);
  // Writes every packing Pack allocated, the matrices shared among threads.
  void PackAll();
  StatusOr<const TensorInfo*> Find(const std::string& name, std::vector<uint64_t> dims, bool required = true);
  // A rows x cols matrix (GGUF dims [cols, rows]).
  StatusOr<kernels::WeightMatrix> Matrix(const std::string& name, int64_t cols, int64_t rows, bool pack = true);
  // The n slices of a 3-D tensor [cols, rows, n], each a rows x cols matrix.
  StatusOr<std::vector<kernels::WeightMatrix>> Slices(const std::string& name, int64_t cols, int64_t rows, int64_t n);
  // A vector converted to fp32; empty when absent and not required.
  StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n, bool required = true);
  // Bytes of the matrices and vectors handed out so far.
  int64_t bytes() const { return bytes_; }

 private:
  const GgufFile& g_;
  std::vector<std::shared_ptr<const kernels::PackedWeights>>* packed_;
  bool pack_;
  struct PackJob {
    kernels::WeightMatrix w;
    uint8_t* out;
  };
  std::vector<PackJob> jobs_;
  int64_t bytes_ = 0;
};

}  // namespace tandem
