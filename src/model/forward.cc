#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/weight_row.h"

namespace tandem {

ForwardPass::ForwardPass(const Model& model, ThreadPool& pool)
    : model_(model), c_(model.config()), pool_(pool) {}

Status ForwardPass::Validate(std::span<const SequenceChunk> batch, const PagePool& cache) const {
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
  auto fit = [](std::vector<float>& v, size_t size) {
    if (v.size() < size) v.resize(size);
  };
  fit(x_, size_t(n) * c_.dim);
  fit(xb_, size_t(n) * c_.dim);
  fit(q_, size_t(n) * c_.q_dim());
  fit(k_, size_t(n) * c_.kv_dim());
  fit(v_, size_t(n) * c_.kv_dim());
  fit(att_, size_t(n) * c_.q_dim());
  fit(hb_, size_t(n) * c_.ffn_dim);
  fit(hb2_, size_t(n) * c_.ffn_dim);
  fit(rope_cos_, size_t(n) * c_.rope_dims / 2);
  fit(rope_sin_, size_t(n) * c_.rope_dims / 2);
  fit(scores_, size_t(pool_.size()) * size_t(max_context));
}

// Splits each matrix's rows across threads in blocks of 8 (the kernels' row
// tile). The split never changes a result: each output element is computed
// whole by one thread, in the canonical order.
void ForwardPass::MatMuls(std::initializer_list<MatMulJob> jobs, const float* x, int n) {
  const auto& kt = kernels::Active();
  const int tasks = pool_.size();
  pool_.ParallelFor(tasks, [&](int t) {
    for (const MatMulJob& job : jobs) {
      const kernels::WeightMatrix& w = *job.w;
      const int64_t per = (w.rows + tasks * 8 - 1) / (tasks * 8) * 8;
      const int64_t r0 = std::min<int64_t>(w.rows, t * per);
      const int64_t r1 = std::min<int64_t>(w.rows, r0 + per);
      if (r0 < r1) kt.matmul_rows(w, x, w.cols, n, job.y, w.rows, r0, r1);
    }
  });
}

// Attention work is split over (token, group of query heads) so that even a
// single decode token keeps every thread busy.
void ForwardPass::Attention(int l, std::span<const SequenceChunk> batch, PagePool& cache) {
  const int n = int(tokens_.size());
  const int64_t qd = c_.q_dim();
  const int heads = int(c_.n_heads);
  const int threads = pool_.size();
  const int head_chunks = n >= threads ? 1 : std::min(heads, threads);
  const int heads_per = (heads + head_chunks - 1) / head_chunks;
  const int64_t stride = int64_t(scores_.size()) / threads;
  const int units = n * head_chunks;
  pool_.ParallelFor(threads, [&](int t) {
    for (int u = t; u < units; u += threads) {
      const int i = u / head_chunks, chunk = u % head_chunks;
      const SequenceChunk& s = batch[size_t(tokens_[size_t(i)].chunk)];
      const int64_t pos = tokens_[size_t(i)].pos;
      kernels::AttentionShape shape{heads, int(c_.n_kv_heads), int(c_.head_dim),
                                    float(1.0 / std::sqrt(double(c_.head_dim))),
                                    chunk * heads_per, std::min(heads, (chunk + 1) * heads_per)};
      kernels::Attention(q_.data() + i * qd, cache.Rows(model_.k_buffer(), l, s.pages),
                         cache.Rows(model_.v_buffer(), l, s.pages), nullptr, pos + 1, shape,
                         scores_.data() + t * stride, att_.data() + i * qd);
    }
  });
}

Status ForwardPass::Run(std::span<const SequenceChunk> batch, PagePool& cache,
                        std::vector<float>* logits) {
  TANDEM_RETURN_IF_ERROR(Validate(batch, cache));
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
  int idx = 0;
  const int half = int(c_.rope_dims / 2);
  for (const SequenceChunk& s : batch) {
    for (int32_t tok : s.tokens) {
      float* row = x_.data() + size_t(idx) * c_.dim;
      const uint8_t* src = emb.data + size_t(tok) * emb.row_bytes;
      for (int64_t d = 0; d < c_.dim; ++d) row[d] = kernels::WeightAt(emb.type, src, d);
      model_.rope().Angles(tokens_[size_t(idx)].pos, rope_cos_.data() + size_t(idx) * half,
                           rope_sin_.data() + size_t(idx) * half);
      ++idx;
    }
  }
  for (int l = 0; l < int(c_.n_layers); ++l) Layer(l, batch, cache);

  // Final norm and the output head, only for the tokens whose logits are wanted.
  std::vector<int> wanted;
  idx = 0;
  for (const SequenceChunk& s : batch) {
    for (size_t j = 0; j < s.tokens.size(); ++j, ++idx) {
      if (s.all_logits || j + 1 == s.tokens.size()) wanted.push_back(idx);
    }
  }
  for (size_t i = 0; i < wanted.size(); ++i) {
    kernels::RmsNorm(x_.data() + size_t(wanted[i]) * c_.dim, model_.weights().output_norm.data(),
                     c_.dim, c_.rms_eps, xb_.data() + i * c_.dim);
  }
  const size_t base = logits->size();
  logits->resize(base + wanted.size() * size_t(c_.vocab_size));
  MatMuls({{&model_.weights().output, logits->data() + base}}, xb_.data(), int(wanted.size()));
  return Status::Ok();
}

void ForwardPass::Layer(int l, std::span<const SequenceChunk> batch, PagePool& cache) {
  const LayerWeights& w = model_.weights().layers[size_t(l)];
  const int n = int(tokens_.size());
  const int64_t dim = c_.dim, qd = c_.q_dim(), kvd = c_.kv_dim();
  for (int i = 0; i < n; ++i) {
    kernels::RmsNorm(x_.data() + i * dim, w.attn_norm.data(), dim, c_.rms_eps, xb_.data() + i * dim);
  }
  MatMuls({{&w.wq, q_.data()}, {&w.wk, k_.data()}, {&w.wv, v_.data()}}, xb_.data(), n);
  const int half = int(c_.rope_dims / 2);
  for (int i = 0; i < n; ++i) {
    float* q = q_.data() + i * qd;
    float* k = k_.data() + i * kvd;
    float* v = v_.data() + i * kvd;
    if (!w.q_bias.empty()) kernels::Add(q, w.q_bias.data(), qd);
    if (!w.k_bias.empty()) kernels::Add(k, w.k_bias.data(), kvd);
    if (!w.v_bias.empty()) kernels::Add(v, w.v_bias.data(), kvd);
    const float* cs = rope_cos_.data() + size_t(i) * half;
    const float* sn = rope_sin_.data() + size_t(i) * half;
    kernels::Rope(q, int(c_.n_heads), int(c_.head_dim), int(c_.rope_dims), cs, sn, c_.rope_neox);
    kernels::Rope(k, int(c_.n_kv_heads), int(c_.head_dim), int(c_.rope_dims), cs, sn, c_.rope_neox);
    const SequenceChunk& s = batch[size_t(tokens_[size_t(i)].chunk)];
    const int64_t pos = tokens_[size_t(i)].pos;
    std::memcpy(cache.Rows(model_.k_buffer(), l, s.pages).Row(pos), k, size_t(kvd) * 4);
    std::memcpy(cache.Rows(model_.v_buffer(), l, s.pages).Row(pos), v, size_t(kvd) * 4);
  }
  Attention(l, batch, cache);
  MatMuls({{&w.wo, xb_.data()}}, att_.data(), n);
  for (int i = 0; i < n; ++i) kernels::Add(x_.data() + i * dim, xb_.data() + i * dim, dim);
  for (int i = 0; i < n; ++i) {
    kernels::RmsNorm(x_.data() + i * dim, w.ffn_norm.data(), dim, c_.rms_eps, xb_.data() + i * dim);
  }
  MatMuls({{&w.w_gate, hb_.data()}, {&w.w_up, hb2_.data()}}, xb_.data(), n);
  for (int i = 0; i < n; ++i) {
    kernels::SiluMul(hb_.data() + size_t(i) * c_.ffn_dim, hb2_.data() + size_t(i) * c_.ffn_dim,
                     c_.ffn_dim);
  }
  MatMuls({{&w.w_down, xb_.data()}}, hb_.data(), n);
  for (int i = 0; i < n; ++i) kernels::Add(x_.data() + i * dim, xb_.data() + i * dim, dim);
}

}  // namespace tandem
