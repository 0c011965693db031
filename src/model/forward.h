// The forward pass over a ragged batch and the paged cache: the batching,
// embeddings, matmuls, cache rows, attention and output head every
// architecture shares; each architecture's layer (model/arch/) runs on them.
//
// One Run() takes any mix of sequences: prompt chunks and single decode
// tokens, each with its own start position and page table. Every token's
// rows of every cache buffer (K, V, and index-K under sparse attention) are
// written into the page pool; attention of a token reads its own sequence's
// rows at positions <= its own. Matmuls treat the batch's tokens as
// independent columns and every output element is reduced in the canonical
// order, so a token's logits are bitwise identical however the batch is
// composed or the prompt chunked (invariant 5).
//
// Sparse attention: each query scores its earlier positions with the
// lightning indexer over the index-K buffer and attends to the top-k
// (ascending position order). With top-k >= its context it attends to every
// position in the same order as dense attention, so the result is bitwise
// identical to dense.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

#include "cache/layer_gates.h"
#include "cache/page_pool.h"
#include "common/aligned.h"
#include "common/thread_pool.h"
#include "kernels/quant_dot.h"
#include "model/arch/architecture.h"
#include "model/cache_spec.h"
#include "model/indexer.h"
#include "model/model.h"

namespace tandem {

struct SequenceChunk {
  std::span<const int32_t> tokens;  // new tokens of this sequence
  int64_t start_pos = 0;            // position of tokens[0]
  std::span<const int32_t> pages;   // page table covering [0, start_pos + tokens.size())
  bool all_logits = false;          // logits for every token, or only for the last
  // A load still landing in this sequence's prefix pages (prefix/tiers.h), or
  // null. Every read of layer l's cached rows waits for gate l.
  const LayerGates* gates = nullptr;
};

class ForwardPass {
 public:
  // REQUIRES: pools passed to Run were built from spec.registry.
  ForwardPass(const Model& model, const CacheSpec& spec, ThreadPool& pool);

  // Appends to *logits one vocab-sized row per requested token, in batch order.
  // Fails without side effects on bad token ids or page tables too short.
  Status Run(std::span<const SequenceChunk> batch, PagePool& cache, std::vector<float>* logits);

  const CacheSpec& spec() const { return spec_; }

  // Called after each layer of every Run, with every registered buffer of that
  // layer written for the batch's tokens (the prefill side streams the layer
  // out from here). Runs on the calling thread.
  void SetLayerHook(std::function<void(int layer)> hook) { layer_hook_ = std::move(hook); }

  // ---- What an architecture's layer (model/arch/) runs on, during Run. ----
  // Activations, [tokens x width] each, cache-line aligned (the matmul
  // kernels' 64-byte loads of them); reused across calls. x is the residual
  // stream; the layer's results go back into it.
  struct Activations {
    AlignedFloats x, xb, q, k, v, att, hb, hb2;
    AlignedFloats index_keys, index_queries, index_weights;  // the indexer's, under sparse attention
  };
  struct MatMulJob {
    const kernels::WeightMatrix* w;
    const float* x;
    int64_t x_stride;
    float* y;
    int64_t y_stride;
  };
  const Model& model() const { return model_; }
  const AttentionGeometry& geometry() const { return geo_; }
  Activations& acts() { return activations_; }
  int tokens() const { return int(tokens_.size()); }
  // Token i's RoPE angles (rope_dims / 2 each).
  const float* rope_cos(int i) const { return rope_cos_.data() + size_t(i) * size_t(c_.rope_dims / 2); }
  const float* rope_sin(int i) const { return rope_sin_.data() + size_t(i) * size_t(c_.rope_dims / 2); }
  // Several matmuls in one parallel region (one barrier); each output element
  // is computed whole by one thread, so the split never changes a result.
  void MatMuls(std::span<const MatMulJob> jobs, int n);
  void MatMuls(std::initializer_list<MatMulJob> jobs, int n) { MatMuls(std::span<const MatMulJob>(jobs.begin(), jobs.size()), n); }
  // fn(i0, i1) over the tokens [0, n) in ranges, across the pool when each
  // token's element-wise work (`floats` values) times n is worth a round of
  // it (a prompt chunk), else on this thread (decode). Each token's values
  // depend on that token alone, so the split never moves a bit.
  void ForTokens(int n, int64_t floats, const std::function<void(int, int)>& fn);
  // Token i's row of buffer b (K, V or latent: the K/V dtype) in layer l.
  void StoreKvRow(CacheBufferId b, int l, int i, const float* x, int64_t n);
  // acts().index_keys of every token into the index-K buffer, quantized as the registry says.
  void StoreIndexKeys(int l);
  // The derived indexer's keys and queries from acts().q and k (geometry().derived_indexer).
  void DeriveIndexKeys(int l);
  // Attention of every token over its cached context in layer l: acts().q in,
  // acts().att out, as geometry() says.
  void Attention(int l);

 private:
  struct TokenRef {
    int chunk;
    int64_t pos;
  };
  Status Validate(std::span<const SequenceChunk> batch, const PagePool& cache) const;
  // The only way this pass reads cached rows: waits on the sequence's gate for
  // the layer first (writes of new tokens go to pages no load touches).
  kernels::PagedRows ReadRows(PagePool& cache, CacheBufferId b, int l, const SequenceChunk& s) const {
    if (s.gates != nullptr) s.gates->Wait(l);
    return cache.Rows(b, l, s.pages);
  }
  // One piece of attention work: `count` consecutive tokens from `token`
  // (query heads [head_begin, head_end)), dense, or one token over its top-k.
  struct AttentionUnit {
    int token;
    int count;
    int head_begin, head_end;
    bool sparse;
    int64_t cost;
  };
  static constexpr int kQueryTile = 32;  // dense query tokens per attention unit
  static constexpr int64_t kMaxScoresBytes = int64_t(64) << 20;  // sparse runs' score rows, all threads
  int sparse_run_ = kQueryTile;          // sparse query tokens per run (Resize)
  int64_t AttnQDim() const { return c_.n_heads * geo_.head_dim; }
  void PlanAttention();
  kernels::AttentionShape AttentionShapeFor(int head_begin, int head_end) const;
  void SelectForFewTokens(int l);
  void SparseRun(int l, const AttentionUnit& a, int thread, float* attn_scratch);
  // The indexer queries of tokens [token, token + count).
  kernels::IndexerQueries IndexQueries(int token, int count) const;
  float* IndexerScratch(int thread);
  void Resize(int n_tokens, int64_t max_context);
  const SequenceChunk& ChunkOf(int i) const { return batch_[size_t(tokens_[size_t(i)].chunk)]; }

  const Model& model_;
  const ModelConfig& c_;
  const CacheSpec spec_;
  ThreadPool& pool_;
  AttentionGeometry geo_;
  std::unique_ptr<ArchLayers> layers_;
  std::unique_ptr<Indexer> indexer_;  // geo_.derived_indexer only (model/indexer.h)
  std::string layout_fingerprint_;
  std::function<void(int)> layer_hook_;
  std::vector<TokenRef> tokens_;
  int64_t max_context_ = 0;
  // The batch and cache of the Run in progress.
  std::span<const SequenceChunk> batch_;
  PagePool* cache_ = nullptr;
  Activations activations_;
  AlignedFloats rope_cos_, rope_sin_, query_means_;
  // Scratch [threads x ...]: scores of kQueryTile tokens and the selected
  // positions of one per thread (or per token, when fewer tokens than
  // threads), and the indexer kernel's scratch per thread.
  std::vector<float> scores_, key_scratch_;
  std::vector<int32_t> positions_;
  std::vector<int64_t> n_positions_;
  kernels::KvType kv_type_ = kernels::KvType::kF32;
  std::vector<AttentionUnit> units_;
  std::vector<int64_t> entries_;      // per token: the dense entries it attends to (pos + 1)
  std::vector<float> attn_scratch_;   // [threads x attn_scratch_per_]
  size_t attn_scratch_per_ = 0;
  // The quantized activations of one MatMuls call's distinct inputs.
  std::vector<kernels::ActStorage> acts_;
};

}  // namespace tandem
