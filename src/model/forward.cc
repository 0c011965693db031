#include "model/forward.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "common/fp8.h"
#include "common/half.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/topk.h"
#include "kernels/weight_row.h"

namespace tandem {

ForwardPass::ForwardPass(const Model& model, const CacheSpec& spec, ThreadPool& pool)
    : model_(model), c_(model.config()), spec_(spec), pool_(pool) {
  layout_fingerprint_ = CacheLayout(spec_.registry, int(c_.n_layers), 0).Fingerprint();
  geo_ = c_.arch().Geometry(c_, spec_);
  if (geo_.derived_indexer) {
    indexer_ = std::make_unique<Indexer>(c_, spec_.attention.index_dims);
    geo_.index_heads = indexer_->n_heads();
    geo_.index_dims = indexer_->dims();
  }
  layers_ = c_.arch().MakeLayers(c_);
  switch (spec_.registry.spec(geo_.k).dtype) {
    case CacheDType::kF16: kv_type_ = kernels::KvType::kF16; break;
    case CacheDType::kBF16: kv_type_ = kernels::KvType::kBF16; break;
    default: kv_type_ = kernels::KvType::kF32; break;
  }
}

Status ForwardPass::Validate(std::span<const SequenceChunk> batch, const PagePool& cache) const {
  if (cache.layout().Fingerprint() != layout_fingerprint_) {
    return InvalidArgument("the page pool's cache layout does not match this forward pass");
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceChunk& s = batch[i];
    if (s.tokens.empty()) return InvalidArgument("batch entry " + std::to_string(i) + " has no tokens");
    if (s.start_pos < 0) return InvalidArgument("negative start position");
    for (int32_t t : s.tokens) {
      if (t < 0 || t >= c_.vocab_size) {
        return InvalidArgument("token id " + std::to_string(t) + " is outside the vocabulary of " +
                               std::to_string(c_.vocab_size));
      }
    }
    const int64_t end = s.start_pos + int64_t(s.tokens.size());
    if (int64_t(s.pages.size()) * kPageTokens < end) {
      return InvalidArgument("page table of batch entry " + std::to_string(i) + " covers " +
                             std::to_string(s.pages.size() * kPageTokens) + " tokens, needs " +
                             std::to_string(end));
    }
    for (int32_t p : s.pages) {
      if (p < 0 || p >= cache.total_pages()) return InvalidArgument("page id out of range");
    }
  }
  return Status::Ok();
}

void ForwardPass::Resize(int n, int64_t max_context) {
  auto fit = [](auto& v, size_t size) {
    if (v.size() < size) v.resize(size);
  };
  const size_t threads = size_t(pool_.size());
  fit(activations_.x, size_t(n) * c_.dim);
  fit(activations_.xb, size_t(n) * c_.dim);
  fit(activations_.q, size_t(n) * AttnQDim());
  fit(activations_.k, size_t(n) * c_.kv_dim());
  fit(activations_.v, size_t(n) * c_.kv_dim());
  fit(activations_.att, size_t(n) * AttnQDim());
  fit(activations_.hb, size_t(n) * c_.ffn_dim);
  fit(activations_.hb2, size_t(n) * c_.ffn_dim);
  fit(rope_cos_, size_t(n) * c_.rope_dims / 2);
  fit(rope_sin_, size_t(n) * c_.rope_dims / 2);
  // Sparse runs score up to kQueryTile tokens at once, fewer where that many
  // rows of scores over a long context would pass kMaxScoresBytes.
  sparse_run_ = int(std::clamp<int64_t>(kMaxScoresBytes / (int64_t(threads) * std::max<int64_t>(1, max_context) * 4), 1,
                                        kQueryTile));
  fit(scores_, threads * size_t(sparse_run_) * size_t(max_context));
  fit(entries_, size_t(n));
  attn_scratch_per_ = size_t(kernels::AttentionScratchFloats(kQueryTile, AttentionShapeFor(0, int(c_.n_heads))));
  fit(attn_scratch_, threads * attn_scratch_per_);
  if (spec_.index_k >= 0) {
    const size_t dims = size_t(geo_.index_dims);
    fit(activations_.index_keys, size_t(n) * dims);
    fit(activations_.index_queries, size_t(n) * dims * size_t(geo_.index_heads));
    fit(activations_.index_weights, size_t(n) * size_t(geo_.index_heads));
    fit(key_scratch_, threads * size_t(kernels::IndexerScratchFloats(kQueryTile, int64_t(dims))));
    fit(positions_, threads * size_t(max_context));
    fit(n_positions_, threads);
  }
  if (indexer_) fit(query_means_, size_t(n) * c_.kv_dim());
  max_context_ = max_context;
  layers_->Reserve(*this, n);
}

void ForwardPass::MatMuls(std::span<const MatMulJob> jobs, int n) {
  const auto& kt = kernels::Active();
  const int tasks = pool_.size();
  // Block-quantized weights multiply quantized activations (kernels/quant_dot.h):
  // each distinct input is quantized once, then every job on it reads it.
  struct Input {
    const float* x;
    int64_t stride, cols;
    int block;
  };
  std::vector<Input> inputs;
  std::vector<int> input_of(jobs.size(), -1);
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!kernels::UsesIntegerDot(jobs[j].w->type)) continue;
    const int block = kernels::ActBlockFor(jobs[j].w->type);
    TANDEM_CHECK_MSG(jobs[j].w->cols % block == 0, "a block-quantized row is whole blocks");
    const Input in{jobs[j].x, jobs[j].x_stride, jobs[j].w->cols, block};
    auto same = [&](const Input& o) { return o.x == in.x && o.stride == in.stride && o.cols == in.cols && o.block == in.block; };
    auto it = std::find_if(inputs.begin(), inputs.end(), same);
    input_of[j] = int(it - inputs.begin());
    if (it == inputs.end()) inputs.push_back(in);
  }
  if (acts_.size() < inputs.size()) acts_.resize(inputs.size());
  std::vector<kernels::QuantizedActs> acts(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs[i];
    kernels::ActStorage& st = acts_[i];
    const size_t elems = size_t(n) * size_t(in.cols);
    if (st.q.size() < elems) st.q.resize(elems);
    if (st.d.size() < elems / size_t(in.block)) st.d.resize(elems / size_t(in.block));
    if (st.sums.size() < elems / 16) st.sums.resize(elems / 16);
    acts[i] = {st.q.data(), st.d.data(), st.sums.data(), in.cols, in.block};
  }
  auto quantize = [&](size_t i, int t0, int t1) {
    if (t0 >= t1) return;
    const Input& in = inputs[i];
    kernels::ActStorage& st = acts_[i];
    const int64_t at = int64_t(t0) * in.cols;
    kt.quantize_acts(in.x + t0 * in.stride, in.stride, t1 - t0, in.cols, in.block, st.q.data() + at,
                     st.d.data() + at / in.block, st.sums.data() + at / 16);
  };
  if (!inputs.empty()) {
    if (int64_t(n) * inputs[0].cols < (int64_t(1) << 16)) {  // decode: not worth a round of the pool
      for (size_t i = 0; i < inputs.size(); ++i) quantize(i, 0, n);
    } else {
      pool_.ParallelFor(tasks, [&](int t) {
        const int per = (n + tasks - 1) / tasks;
        for (size_t i = 0; i < inputs.size(); ++i) quantize(i, std::min(n, t * per), std::min(n, (t + 1) * per));
      });
    }
  }
  pool_.ParallelFor(tasks, [&](int t) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      const MatMulJob& job = jobs[j];
      const kernels::WeightMatrix& w = *job.w;
      const int64_t per = (w.rows + tasks * 16 - 1) / (tasks * 16) * 16;  // the kernels' row group (quant_pack.h)
      const int64_t r0 = std::min<int64_t>(w.rows, t * per);
      const int64_t r1 = std::min<int64_t>(w.rows, r0 + per);
      if (r0 >= r1) continue;
      if (input_of[j] >= 0) {
        kt.matmul_rows_q(w, acts[size_t(input_of[j])], n, job.y, job.y_stride, r0, r1);
      } else {
        kt.matmul_rows(w, job.x, job.x_stride, n, job.y, job.y_stride, r0, r1);
      }
    }
  });
}

Status ForwardPass::Run(std::span<const SequenceChunk> batch, PagePool& cache,
                        std::vector<float>* logits) {
  TANDEM_RETURN_IF_ERROR(Validate(batch, cache));
  batch_ = batch;
  cache_ = &cache;
  tokens_.clear();
  int64_t max_context = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    for (size_t j = 0; j < batch[i].tokens.size(); ++j) {
      tokens_.push_back({int(i), batch[i].start_pos + int64_t(j)});
    }
    max_context = std::max<int64_t>(max_context, batch[i].start_pos + batch[i].tokens.size());
  }
  const int n = int(tokens_.size());
  Resize(n, max_context);
  const auto& emb = model_.weights().token_embd;
  const int half = int(c_.rope_dims / 2);
  ForTokens(n, c_.dim, [&](int i0, int i1) {
    for (int i = i0; i < i1; ++i) {
      const SequenceChunk& s = ChunkOf(i);
      const int32_t tok = s.tokens[size_t(tokens_[size_t(i)].pos - s.start_pos)];
      float* row = activations_.x.data() + size_t(i) * c_.dim;
      const uint8_t* src = emb.data + size_t(tok) * emb.row_bytes;
      for (int64_t d = 0; d < c_.dim; ++d) row[d] = kernels::WeightAt(emb.type, src, d);
      model_.rope().Angles(tokens_[size_t(i)].pos, rope_cos_.data() + size_t(i) * half,
                           rope_sin_.data() + size_t(i) * half);
    }
  });
  PlanAttention();
  for (int l = 0; l < int(c_.n_layers); ++l) {
    layers_->Forward(*this, l);
    if (layer_hook_) layer_hook_(l);
  }
  batch_ = {};
  cache_ = nullptr;

  // Final norm and the output head, only for the tokens whose logits are wanted.
  std::vector<int> wanted;
  int idx = 0;
  for (const SequenceChunk& s : batch) {
    for (size_t j = 0; j < s.tokens.size(); ++j, ++idx) {
      if (s.all_logits || j + 1 == s.tokens.size()) wanted.push_back(idx);
    }
  }
  for (size_t i = 0; i < wanted.size(); ++i) {
    kernels::RmsNorm(activations_.x.data() + size_t(wanted[i]) * c_.dim, model_.weights().output_norm.data(),
                     c_.dim, c_.rms_eps, activations_.xb.data() + i * c_.dim);
  }
  const size_t base = logits->size();
  logits->resize(base + wanted.size() * size_t(c_.vocab_size));
  const auto& out = model_.weights().output;
  MatMuls({{&out, activations_.xb.data(), c_.dim, logits->data() + base, c_.vocab_size}}, int(wanted.size()));
  return Status::Ok();
}

void ForwardPass::ForTokens(int n, int64_t floats, const std::function<void(int, int)>& fn) {
  const int tasks = pool_.size();
  if (tasks == 1 || n < 2 * tasks || int64_t(n) * floats < (int64_t(1) << 16)) return fn(0, n);
  pool_.ParallelFor(tasks, [&](int t) {
    const int per = (n + tasks - 1) / tasks;
    const int i0 = std::min(n, t * per), i1 = std::min(n, i0 + per);
    if (i0 < i1) fn(i0, i1);
  });
}

// Index keys go into the index-K buffer (quantized as the registry says);
// index queries stay in activations for this layer's top-k selection.
void ForwardPass::DeriveIndexKeys(int l) {
  const int n = int(tokens_.size());
  const int64_t dims = indexer_->dims(), kvd = c_.kv_dim(), hd = c_.head_dim;
  const int heads = indexer_->n_heads();
  for (int i = 0; i < n; ++i) indexer_->GroupMeans(activations_.q.data() + i * c_.q_dim(), query_means_.data() + i * kvd);
  std::vector<MatMulJob> jobs = {
      {&indexer_->key_projection(), activations_.k.data(), kvd, activations_.index_keys.data(), dims}};
  for (int g = 0; g < heads; ++g) {
    jobs.push_back({&indexer_->query_projection(g), query_means_.data() + g * hd, kvd,
                    activations_.index_queries.data() + g * dims, dims * heads});
  }
  MatMuls(jobs, n);
  StoreIndexKeys(l);
}

// activations_.index_keys of every token into the index-K buffer, quantized as the registry says.
void ForwardPass::StoreIndexKeys(int l) {
  const int n = int(tokens_.size());
  const int64_t dims = geo_.index_dims;
  const bool fp8 = spec_.attention.index_k_dtype == CacheDType::kFp8E4M3Scaled;
  for (int i = 0; i < n; ++i) {
    const kernels::PagedRows rows = cache_->Rows(spec_.index_k, l, ChunkOf(i).pages);
    const int64_t pos = tokens_[size_t(i)].pos;
    const float* key = activations_.index_keys.data() + i * dims;
    if (fp8) {
      QuantizeFp8Row(key, dims, rows.RowBytes(pos), rows.Scale(pos));
    } else {
      auto* out = reinterpret_cast<uint16_t*>(rows.RowBytes(pos));
      for (int64_t d = 0; d < dims; ++d) out[d] = FloatToBf16(key[d]);
    }
  }
}

kernels::IndexerQueries ForwardPass::IndexQueries(int token, int count) const {
  const int64_t dims = geo_.index_dims, per_token = dims * geo_.index_heads;
  // The derived indexer's head weights are constants; a DSA model's come per token (indexer.proj).
  const float* w = indexer_ ? indexer_->head_weights() : activations_.index_weights.data() + size_t(token) * size_t(geo_.index_heads);
  return {activations_.index_queries.data() + size_t(token) * per_token, per_token, w, indexer_ ? 0 : int64_t(geo_.index_heads),
          geo_.index_heads, dims, count};
}

float* ForwardPass::IndexerScratch(int thread) {
  return key_scratch_.data() +
         size_t(thread) * size_t(kernels::IndexerScratchFloats(kQueryTile, geo_.index_dims));
}

void ForwardPass::SelectForFewTokens(int l) {
  const int n = int(tokens_.size());
  const int threads = pool_.size();
  const bool fp8 = spec_.attention.index_k_dtype == CacheDType::kFp8E4M3Scaled;
  pool_.ParallelFor(threads, [&](int t) {
    for (int i = 0; i < n; ++i) {
      const int64_t context = tokens_[size_t(i)].pos + 1;
      if (context <= spec_.attention.top_k) continue;
      const int64_t per = (context + threads - 1) / threads;
      const int64_t begin = std::min(context, t * per), end = std::min(context, begin + per);
      kernels::Active().indexer_scores(IndexQueries(i, 1), ReadRows(*cache_, spec_.index_k, l, ChunkOf(i)),
                                       fp8, begin, end,
                                       scores_.data() + size_t(i) * size_t(max_context_) + begin, 0,
                                       IndexerScratch(t));
    }
  });
  for (int i = 0; i < n; ++i) {
    const int64_t context = tokens_[size_t(i)].pos + 1;
    n_positions_[size_t(i)] =
        context <= spec_.attention.top_k
            ? -1
            : kernels::SelectTopK(scores_.data() + size_t(i) * size_t(max_context_), context,
                                  spec_.attention.top_k, positions_.data() + size_t(i) * max_context_);
  }
}

// A run of sparse tokens of one sequence: one indexer call scores every
// position for all of them (each key decoded once for the run), then each
// token takes its top-k and attends to it.
void ForwardPass::SparseRun(int l, const AttentionUnit& a, int thread, float* attn_scratch) {
  const SequenceChunk& s = ChunkOf(a.token);
  const int64_t stride = max_context_;
  float* scores = scores_.data() + size_t(thread) * size_t(sparse_run_) * size_t(stride);
  int32_t* positions = positions_.data() + size_t(thread) * size_t(stride);
  const int64_t end = entries_[size_t(a.token + a.count - 1)];  // the run's longest context
  kernels::Active().indexer_scores(IndexQueries(a.token, a.count), ReadRows(*cache_, spec_.index_k, l, s),
                                   spec_.attention.index_k_dtype == CacheDType::kFp8E4M3Scaled, 0, end,
                                   scores, stride, IndexerScratch(thread));
  const kernels::PagedRows k = ReadRows(*cache_, geo_.k, l, s), v = ReadRows(*cache_, geo_.v, l, s);
  const int64_t qd = AttnQDim();
  for (int j = 0; j < a.count; ++j) {
    const int i = a.token + j;
    const int64_t selected = kernels::SelectTopK(scores + j * stride, entries_[size_t(i)],
                                                 spec_.attention.top_k, positions);
    const kernels::AttentionQueries query{activations_.q.data() + i * qd, qd, activations_.att.data() + i * qd, qd, &selected, 1};
    kernels::Attention(query, k, v, positions, AttentionShapeFor(a.head_begin, a.head_end), attn_scratch);
  }
}

void ForwardPass::StoreKvRow(CacheBufferId b, int l, int i, const float* x, int64_t n) {
  uint8_t* row = cache_->Rows(b, l, ChunkOf(i).pages).RowBytes(tokens_[size_t(i)].pos);
  auto* h = reinterpret_cast<uint16_t*>(row);
  switch (kv_type_) {
    case kernels::KvType::kF32: std::memcpy(row, x, size_t(n) * 4); break;
    case kernels::KvType::kF16: for (int64_t d = 0; d < n; ++d) h[d] = FloatToF16(x[d]); break;
    case kernels::KvType::kBF16: for (int64_t d = 0; d < n; ++d) h[d] = FloatToBf16(x[d]); break;
  }
}

kernels::AttentionShape ForwardPass::AttentionShapeFor(int head_begin, int head_end) const {
  return {int(c_.n_heads), int(geo_.kv_heads), int(geo_.head_dim), geo_.scale, head_begin, head_end, kv_type_};
}

// The units of attention work of one Run (the same for every layer). With
// fewer tokens than threads (decode), each token's heads are split so every
// thread is busy. Otherwise each KV head of each run of up to kQueryTile
// consecutive dense tokens of a chunk is one unit (the tiled kernels share
// every K and V row among its query rows); a token attending to its own top-k
// list is a unit alone. Largest first, so the causal triangle balances.
void ForwardPass::PlanAttention() {
  const int n = int(tokens_.size());
  const int heads = int(c_.n_heads), group = int(c_.n_heads / geo_.kv_heads);
  const int threads = pool_.size();
  const int64_t top_k = geo_.sparse ? spec_.attention.top_k : INT64_MAX;
  units_.clear();
  for (int i = 0; i < n; ++i) entries_[size_t(i)] = tokens_[size_t(i)].pos + 1;
  if (n < threads) {
    const int chunks = std::min(heads, threads), per = (heads + chunks - 1) / chunks;
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < chunks; ++c) {
        const int h0 = c * per, h1 = std::min(heads, (c + 1) * per);
        if (h0 < h1) units_.push_back({i, 1, h0, h1, entries_[size_t(i)] > top_k, entries_[size_t(i)]});
      }
    }
  } else {
    // Costs in (entry x KV-head group) units: a sparse token attends to top_k
    // entries with every group and scores its whole context per index head.
    const int64_t groups = heads / group, index_heads = geo_.sparse ? geo_.index_heads : 0;
    for (int i = 0; i < n;) {
      // A run of up to kQueryTile consecutive tokens of one chunk, all dense or all sparse.
      const bool sparse = entries_[size_t(i)] > top_k;
      int j = i + 1;
      while (j < n && j - i < (sparse ? sparse_run_ : kQueryTile) &&
             tokens_[size_t(j)].chunk == tokens_[size_t(i)].chunk && (entries_[size_t(j)] > top_k) == sparse) {
        ++j;
      }
      if (sparse) {
        const int64_t per_token = top_k * groups + entries_[size_t(j - 1)] * index_heads;
        units_.push_back({i, j - i, 0, heads, true, (j - i) * per_token});
      } else {
        for (int g = 0; g * group < heads; ++g) {
          units_.push_back({i, j - i, g * group, (g + 1) * group, false, entries_[size_t(j - 1)] * (j - i)});
        }
      }
      i = j;
    }
  }
  std::stable_sort(units_.begin(), units_.end(),
                   [](const AttentionUnit& a, const AttentionUnit& b) { return a.cost > b.cost; });
}

// Threads take units in order as they finish the previous one; every unit
// writes its own outputs and the kernels' order does not depend on the
// split, so the result never depends on who ran what.
void ForwardPass::Attention(int l) {
  const int64_t qd = AttnQDim();
  const int threads = pool_.size();
  const bool few = int(tokens_.size()) < threads;
  // Few tokens (decode): score each token's positions with all threads and
  // select its top-k before the heads are split.
  if (geo_.sparse && few) SelectForFewTokens(l);
  std::atomic<size_t> next{0};
  pool_.ParallelFor(threads, [&](int t) {
    float* scratch = attn_scratch_.data() + size_t(t) * attn_scratch_per_;
    for (size_t u = next.fetch_add(1); u < units_.size(); u = next.fetch_add(1)) {
      const AttentionUnit& a = units_[u];
      if (a.sparse && !few) {
        SparseRun(l, a, t, scratch);
        continue;
      }
      const SequenceChunk& s = ChunkOf(a.token);
      const int32_t* positions = nullptr;
      const int64_t* n_entries = entries_.data() + a.token;
      if (a.sparse) {  // few tokens: selected before the heads were split
        positions = positions_.data() + size_t(a.token) * size_t(max_context_);
        n_entries = n_positions_.data() + a.token;
      }
      const kernels::AttentionQueries queries{activations_.q.data() + a.token * qd, qd, activations_.att.data() + a.token * qd,
                                              qd, n_entries, a.count};
      kernels::Attention(queries, ReadRows(*cache_, geo_.k, l, s), ReadRows(*cache_, geo_.v, l, s),
                         positions, AttentionShapeFor(a.head_begin, a.head_end), scratch);
    }
  });
}

}  // namespace tandem
