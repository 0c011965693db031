// An independent float64 implementation of the llama forward pass, written
// plainly for tests: contiguous KV, libm math, its own weight decoding. The
// optimized runtime must match it within a normalized-error bound.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace tandem::testing {

int ActBlock(const GgufFile& gguf, const std::string& name);
std::vector<double> QuantizedActs(const std::vector<double>& x, int block);

class ReferenceModel {
 public:
  explicit ReferenceModel(const GgufFile& gguf);
  int64_t vocab() const { return vocab_; }
  // Logits for every position of `tokens`, row-major [tokens.size() x vocab].
  std::vector<double> Forward(const std::vector<int32_t>& tokens) const;

 private:
  std::vector<double> Tensor(const std::string& name) const;
  // x as the product with tensor `name` sees it (QuantizedActs).
  std::vector<double> Acts(const std::string& name, const std::vector<double>& x) const {
    return QuantizedActs(x, ActBlock(g_, name));
  }
  const GgufFile& g_;
  std::string arch_;
  int64_t dim_, layers_, heads_, kv_heads_, head_dim_, ffn_, vocab_;
  double eps_, theta_, linear_scale_ = 1.0;
  bool neox_;
};

// The reference's building blocks, shared with the deepseek32 reference
// (dsa_reference.h): a tensor's every element decoded to double by the
// reference's own decoding; RMS norm; y = W x with W [rows][cols].
std::vector<double> ReferenceTensor(const GgufFile& gguf, const std::string& name);
void RmsNorm(const std::vector<double>& x, const std::vector<double>& w, double eps, std::vector<double>& out);
std::vector<double> MatVec(const std::vector<double>& w, const std::vector<double>& x);
// The activation block of a tensor's type (kernels/quant_dot.h): 256 for the
// K-quants, whose matrix products see their input quantized to 8 bits per
// element in blocks of that many; 0 for the others (fp32 products).
int ActBlock(const GgufFile& gguf, const std::string& name);
// x as the runtime's integer dot products see it for an activation block
// (quant_dot.h's step 1, in fp32 as the runtime does it, then back to
// double); x itself for block 0.
std::vector<double> QuantizedActs(const std::vector<double>& x, int block);

// ||a - b|| / ||b|| over all elements.
double NormalizedError(const std::vector<float>& a, const std::vector<double>& b);

}  // namespace tandem::testing
