// The llama-family forward pass over a ragged batch and the paged cache.
//
// One Run() takes any mix of sequences: prompt chunks and single decode
// tokens, each with its own start position and page table. Every token's
// K/V rows are written into the page pool; attention of a token reads its own
// sequence's rows at positions <= its own. Matmuls treat the batch's tokens
// as independent columns and every output element is reduced in the canonical
// order, so a token's logits are bitwise identical however the batch is
// composed or the prompt chunked (invariant 5).
#pragma once

#include <span>
#include <vector>

#include "cache/page_pool.h"
#include "common/thread_pool.h"
#include "model/model.h"

namespace tandem {

struct SequenceChunk {
  std::span<const int32_t> tokens;  // new tokens of this sequence
  int64_t start_pos = 0;            // position of tokens[0]
  std::span<const int32_t> pages;   // page table covering [0, start_pos + tokens.size())
  bool all_logits = false;          // logits for every token, or only for the last
};

class ForwardPass {
 public:
  ForwardPass(const Model& model, ThreadPool& pool);

  // Appends to *logits one vocab-sized row per requested token, in batch order.
  // Fails without side effects on bad token ids or page tables too short.
  Status Run(std::span<const SequenceChunk> batch, PagePool& cache, std::vector<float>* logits);

 private:
  struct TokenRef {
    int chunk;
    int64_t pos;
  };
  Status Validate(std::span<const SequenceChunk> batch, const PagePool& cache) const;
  struct MatMulJob {
    const kernels::WeightMatrix* w;
    float* y;
  };
  // Several matmuls over the same input in one parallel region (one barrier).
  void MatMuls(std::initializer_list<MatMulJob> jobs, const float* x, int n);
  void Attention(int l, std::span<const SequenceChunk> batch, PagePool& cache);
  void Layer(int l, std::span<const SequenceChunk> batch, PagePool& cache);
  void Resize(int n_tokens, int64_t max_context);

  const Model& model_;
  const ModelConfig& c_;
  ThreadPool& pool_;
  std::vector<TokenRef> tokens_;
  // Activations, [n_tokens x width] each; reused across calls.
  std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_, rope_cos_, rope_sin_, scores_;
};

}  // namespace tandem
