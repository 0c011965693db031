// The lightning indexer (DeepSeek sparse attention): per layer, each token
// writes an index key into the index-K cache buffer, and each query scores
// earlier tokens with score(t, s) = sum_h w_h(t) * ReLU(q_h(t) . k(s)) to pick
// the positions it attends to.
//
// Models without trained indexer weights get derived ones, so the top-k
// tracks the model's own attention. With P a fixed pseudo-random
// index_dims x kv_dim matrix (orthonormal columns when kv_dim <= index_dims,
// otherwise a scaled random projection):
//   index key      k_I(s)   = P k(s)                (k: the layer's RoPE'd keys, all KV heads)
//   index query    q_I,g(t) = P E_g qbar_g(t)       one index head per KV head g;
//                  qbar_g = mean of the RoPE'd queries of g's group, E_g places it in g's block
//   head weight    w_g      = 1 / n_kv_heads
// so q_I,g . k_I = qbar_g . k_g exactly when P^T P = I: the score is the mean
// positive attention logit of each KV group, before softmax.
#pragma once

#include <vector>

#include "kernels/kernel_table.h"
#include "model/config.h"

namespace tandem {

class Indexer {
 public:
  Indexer(const ModelConfig& config, int64_t index_dims);

  int n_heads() const { return n_heads_; }
  int64_t dims() const { return dims_; }
  const float* head_weights() const { return weights_.data(); }

  // Index keys of n tokens: keys [n x kv_dim] -> out [n x dims].
  // Index queries of n tokens: queries [n x q_dim] -> out [n x n_heads x dims].
  // Each is one call of the canonical matmul per row; threads split tokens.
  const kernels::WeightMatrix& key_projection() const { return key_projection_; }
  const kernels::WeightMatrix& query_projection(int group) const {
    return query_projection_[size_t(group)];
  }
  // qbar for one token: the mean query of each KV group, [n_kv_heads x head_dim].
  void GroupMeans(const float* q, float* qbar) const;

 private:
  int n_heads_;
  int64_t dims_, head_dim_, group_;
  std::vector<float> projection_;  // dims x kv_dim, row-major
  std::vector<float> weights_;
  kernels::WeightMatrix key_projection_;
  std::vector<kernels::WeightMatrix> query_projection_;  // views into projection_
};

}  // namespace tandem
