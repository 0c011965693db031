// `tandem bench ...`: end-to-end benchmarks that report ratios against the
// machine's own limits measured in the same run.
#include <chrono>
#include <cstdio>
#include <memory>

#include "bin/commands.h"
#include "bin/model_options.h"
#include "kernels/cpu.h"
#include "kernels/roofline.h"
#include "kernels/topk.h"
#include "common/fp8.h"
#include "common/half.h"
#include "model/forward.h"
#include "model/presets.h"

namespace tandem::cli {
namespace {

struct ModelBenchArgs {
  std::string preset = "100m";
  std::vector<std::string> types = {"f32", "f16"};
  int threads = 2;
  int prompt_tokens = 256;
  int decode_tokens = 32;
};

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct ModelBenchResult {
  double prefill_tps = 0, prefill_gflops = 0, decode_tps = 0, decode_gbps = 0;
  int64_t weight_bytes = 0;
};

// FLOPs of the matmuls for one token (2 per multiply-add), without attention.
double MatmulFlopsPerToken(const ModelConfig& c) {
  const double per_layer = double(c.dim) * (c.q_dim() + 2 * c.kv_dim()) + double(c.q_dim()) * c.dim +
                           3.0 * double(c.dim) * c.ffn_dim;
  return 2.0 * (per_layer * c.n_layers + double(c.dim) * c.vocab_size);
}

ModelBenchResult BenchOne(const Model& m, ThreadPool& threads, const ModelBenchArgs& a) {
  const ModelConfig& c = m.config();
  ModelBenchResult r;
  r.weight_bytes = m.weights().matrix_bytes;
  const int64_t total = a.prompt_tokens + a.decode_tokens;
  const CacheSpec spec = *MakeCacheSpec(c);
  PagePool pool(spec.registry, int(c.n_layers), (total + kPageTokens - 1) / kPageTokens);
  auto pages = *pool.Allocate(pool.total_pages());
  ForwardPass fwd(m, spec, threads);
  std::vector<int32_t> tokens(size_t(a.prompt_tokens));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 3) % size_t(c.vocab_size));
  std::vector<float> logits;
  // Warm-up pass (page faults, caches), then the timed prefill.
  SequenceChunk warm{std::span<const int32_t>(tokens).first(8), 0, pages, false};
  (void)fwd.Run({&warm, 1}, pool, &logits);
  SequenceChunk prompt{tokens, 0, pages, false};
  auto t0 = std::chrono::steady_clock::now();
  logits.clear();
  (void)fwd.Run({&prompt, 1}, pool, &logits);
  const double prefill_s = Since(t0);
  r.prefill_tps = a.prompt_tokens / prefill_s;
  r.prefill_gflops = MatmulFlopsPerToken(c) * a.prompt_tokens / prefill_s / 1e9;
  int32_t next = 1;
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < a.decode_tokens; ++i) {
    SequenceChunk step{std::span<const int32_t>(&next, 1), a.prompt_tokens + i, pages, false};
    logits.clear();
    (void)fwd.Run({&step, 1}, pool, &logits);
    next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const double decode_s = Since(t0);
  r.decode_tps = a.decode_tokens / decode_s;
  r.decode_gbps = double(r.weight_bytes) * r.decode_tps / 1e9;
  pool.Release(pages);
  return r;
}

int RunModelBench(const ModelBenchArgs& a) {
  ThreadPool threads(a.threads);
  auto preset = FindPreset(a.preset);
  if (!preset.ok()) {
    std::fprintf(stderr, "error: %s\n", preset.status().ToString().c_str());
    return 1;
  }
  std::printf("measuring the machine (memory read bandwidth, FMA peak) with %d threads...\n",
              threads.size());
  const kernels::Roofline roof = kernels::MeasureRoofline(threads);
  std::printf("  DRAM read %.1f GB/s | single-thread memcpy %.1f GB/s | FMA peak %.1f GFLOP/s | kernels %s\n\n",
              roof.read_gbps, roof.memcpy_gbps, roof.fma_gflops,
              kernels::IsaName(kernels::ActiveIsa()));
  std::printf("%-6s %-5s %9s | %10s %9s %7s | %9s %9s %8s %8s\n", "preset", "type", "weights",
              "prefill/s", "GFLOP/s", "of peak", "decode/s", "GB/s", "DRAM", "ratio");
  for (const std::string& type_name : a.types) {
    auto type = ParseTensorType(type_name);
    if (!type.ok()) {
      std::fprintf(stderr, "error: %s\n", type.status().ToString().c_str());
      return 1;
    }
    auto writer = BuildRandomModel(*preset, *type, 1);
    if (!writer.ok()) return 1;
    const std::vector<uint8_t> bytes = writer->Serialize();
    auto gguf = GgufFile::Parse(bytes);
    auto model = gguf.ok() ? Model::FromGguf(std::move(gguf).value())
                           : StatusOr<std::unique_ptr<Model>>(gguf.status());
    if (!model.ok()) {
      std::fprintf(stderr, "error: %s\n", model.status().ToString().c_str());
      return 1;
    }
    // The machine's bandwidth drifts (shared host): measure it right around the
    // decode run and compare against the better of the two readings.
    const double before = kernels::MeasureReadBandwidth(threads, int64_t(512) << 20, 3);
    const ModelBenchResult r = BenchOne(**model, threads, a);
    const double dram = std::max(before, kernels::MeasureReadBandwidth(threads, int64_t(512) << 20, 3));
    std::printf("%-6s %-5s %7.0fMB | %10.1f %9.1f %6.0f%% | %9.2f %9.2f %8.1f %8.2f\n",
                a.preset.c_str(), type_name.c_str(), r.weight_bytes / 1e6, r.prefill_tps,
                r.prefill_gflops, 100.0 * r.prefill_gflops / roof.fma_gflops, r.decode_tps,
                r.decode_gbps, dram, r.decode_gbps / dram);
    std::fflush(stdout);
  }
  std::printf("\nprefill: %d-token prompt in one chunk (GFLOP/s counts matmul FLOPs only);\n"
              "decode: %d greedy steps after it; GB/s = matrix bytes streamed per token x tokens/s;\n"
              "DRAM = read bandwidth measured just before and after that decode run; ratio = GB/s / DRAM.\n",
              a.prompt_tokens, a.decode_tokens);
  return 0;
}

struct IndexerBenchArgs {
  std::vector<int64_t> contexts = {2048, 16384, 81920};
  int64_t top_k = 2048;
  int threads = 2;
  int heads = 4;
};

// One decode query per repetition: score every position of the context with
// the lightning indexer (threads split positions), then select the top-k.
void BenchIndexerOne(const IndexerBenchArgs& a, CacheDType dtype, int64_t context, ThreadPool& threads) {
  CacheBufferRegistry registry;
  const CacheBufferId id = *registry.Register({"index_k", dtype, 128});
  const int64_t n_pages = (context + kPageTokens - 1) / kPageTokens;
  PagePool pool(registry, 1, n_pages);
  const std::vector<int32_t> pages = *pool.Allocate(n_pages);
  const kernels::PagedRows rows = pool.Rows(id, 0, pages);
  const bool fp8 = dtype == CacheDType::kFp8E4M3Scaled;
  std::vector<float> key(128);
  for (int64_t pos = 0; pos < context; ++pos) {
    for (int i = 0; i < 128; ++i) key[size_t(i)] = float((pos * 131 + i * 17) % 97) / 48.0f - 1.0f;
    if (fp8) {
      QuantizeFp8Row(key.data(), 128, rows.RowBytes(pos), rows.Scale(pos));
    } else {
      auto* h = reinterpret_cast<uint16_t*>(rows.RowBytes(pos));
      for (int i = 0; i < 128; ++i) h[i] = FloatToBf16(key[size_t(i)]);
    }
  }
  std::vector<float> q(size_t(a.heads) * 128), w(size_t(a.heads), 1.0f / float(a.heads));
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(int(i * 37 % 101) - 50) / 50.0f;
  const kernels::IndexerQuery query{q.data(), w.data(), a.heads, 128};
  std::vector<float> scores(static_cast<size_t>(context)), scratch(static_cast<size_t>(threads.size()) * 128);
  std::vector<int32_t> selected(static_cast<size_t>(context));
  const int reps = int(std::max<int64_t>(3, 4'000'000 / context));
  double score_s = 0, topk_s = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    const int tasks = threads.size();
    threads.ParallelFor(tasks, [&](int t) {
      const int64_t per = (context + tasks - 1) / tasks;
      const int64_t b = std::min(context, t * per), e = std::min(context, b + per);
      kernels::Active().indexer_scores(query, rows, fp8, b, e, scores.data() + b, scratch.data() + t * 128);
    });
    score_s += Since(t0);
    t0 = std::chrono::steady_clock::now();
    kernels::SelectTopK(scores.data(), context, a.top_k, selected.data());
    topk_s += Since(t0);
  }
  const double total = (score_s + topk_s) / reps;
  std::printf("%-5s %8lld | %12.1f %12.1f | %9.3f %9.3f | %8.2f\n", fp8 ? "fp8" : "bf16",
              (long long)context, context / total / 1e6, context / (score_s / reps) / 1e6,
              score_s / reps * 1e3, topk_s / reps * 1e3,
              double(context) * double(registry.spec(id).BytesPerToken()) / (score_s / reps) / 1e9);
  pool.Release(pages);
}

int RunIndexerBench(const IndexerBenchArgs& a) {
  ThreadPool threads(a.threads);
  std::printf("lightning indexer, one decode query: %d heads x 128 dims, top-k %lld, %d threads, %s kernels\n\n",
              a.heads, (long long)a.top_k, threads.size(), kernels::IsaName(kernels::ActiveIsa()));
  std::printf("%-5s %8s | %12s %12s | %9s %9s | %8s\n", "dtype", "context", "Mtok/s all",
              "Mtok/s score", "score ms", "top-k ms", "GB/s");
  for (int64_t context : a.contexts) {
    for (CacheDType dtype : {CacheDType::kFp8E4M3Scaled, CacheDType::kBF16}) {
      BenchIndexerOne(a, dtype, context, threads);
    }
  }
  std::printf("\nMtok/s all = context tokens scanned per second including top-k selection;\n"
              "GB/s = index-K bytes read per second while scoring.\n");
  return 0;
}

}  // namespace

void RegisterBench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks, reported against measured machine limits");
  bench->require_subcommand(1);
  auto args = std::make_shared<ModelBenchArgs>();
  CLI::App* model = bench->add_subcommand("model", "Prefill and decode speed vs. FMA peak and DRAM bandwidth");
  model->add_option("--preset", args->preset, "Model preset (generated in memory)");
  model->add_option("--types", args->types, "Weight types to compare")->delimiter(',');
  model->add_option("-t,--threads", args->threads, "Threads")->check(CLI::Range(1, 256));
  model->add_option("--prompt-tokens", args->prompt_tokens, "Prefill length")->check(CLI::Range(8, 1 << 16));
  model->add_option("--decode-tokens", args->decode_tokens, "Decode steps")->check(CLI::Range(1, 1 << 16));
  model->callback([args] { SetExitCode(RunModelBench(*args)); });

  auto iargs = std::make_shared<IndexerBenchArgs>();
  CLI::App* indexer = bench->add_subcommand("indexer", "Sparse-attention indexer scoring + top-k throughput, fp8 vs bf16");
  indexer->add_option("--contexts", iargs->contexts, "Context lengths")->delimiter(',');
  indexer->add_option("--topk", iargs->top_k, "Top-k")->check(CLI::Range(1, 1 << 24));
  indexer->add_option("-t,--threads", iargs->threads, "Threads")->check(CLI::Range(1, 256));
  indexer->add_option("--heads", iargs->heads, "Index heads")->check(CLI::Range(1, 64));
  indexer->callback([iargs] { SetExitCode(RunIndexerBench(*iargs)); });
  RegisterServeBench(*bench);
  RegisterHandoffBench(*bench);
  RegisterPrefillBench(*bench);
  RegisterAgenticBench(*bench);
}

}  // namespace tandem::cli
