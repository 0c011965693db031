// `tandem bench ...`: end-to-end benchmarks that report ratios against the
// machine's own limits measured in the same run.
#include <chrono>
#include <cstdio>
#include <memory>

#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "common/env.h"
#include "common/splitmix.h"
#include "cache/page_pool.h"
#include "common/fp8.h"
#include "common/half.h"
#include "common/thread_pool.h"
#include "kernels/cpu.h"
#include "kernels/topk.h"

namespace tandem::cli {
namespace {

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
  std::vector<int32_t> pages = *pool.Allocate(n_pages);
  // A served sequence's pages lie anywhere in the pool: scatter them.
  for (size_t i = pages.size(); i > 1; --i) std::swap(pages[i - 1], pages[SplitMix64(i) % i]);
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
  const kernels::IndexerQueries query{q.data(), 0, w.data(), 0, a.heads, 128, 1};
  const size_t per_thread = size_t(kernels::IndexerScratchFloats(1, 128));
  std::vector<float> scores(static_cast<size_t>(context)), scratch(static_cast<size_t>(threads.size()) * per_thread);
  std::vector<int32_t> selected(static_cast<size_t>(context));
  const int reps = int(std::max<int64_t>(3, 4'000'000 / context));
  double score_s = 0, topk_s = 0;
  for (int r = 0; r < reps; ++r) {
    auto t0 = Env::Default().Now();
    const int tasks = threads.size();
    threads.ParallelFor(tasks, [&](int t) {
      const int64_t per = (context + tasks - 1) / tasks;
      const int64_t b = std::min(context, t * per), e = std::min(context, b + per);
      kernels::Active().indexer_scores(query, rows, fp8, b, e, scores.data() + b, 0,
                                       scratch.data() + size_t(t) * per_thread);
    });
    score_s += Since(t0);
    t0 = Env::Default().Now();
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
  RegisterModelBench(*bench);

  auto iargs = std::make_shared<IndexerBenchArgs>();
  CLI::App* indexer = bench->add_subcommand("indexer", "Sparse-attention indexer scoring + top-k throughput, fp8 vs bf16");
  indexer->add_option("--contexts", iargs->contexts, "Context lengths")->delimiter(',');
  indexer->add_option("--topk", iargs->top_k, "Top-k")->check(CLI::Range(1, 1 << 24));
  AddThreads(indexer, &iargs->threads);
  indexer->add_option("--heads", iargs->heads, "Index heads")->check(CLI::Range(1, 64));
  indexer->callback([iargs] { SetExitCode(RunIndexerBench(*iargs)); });
  RegisterServeBench(*bench);
  RegisterStructuredBench(*bench);
  RegisterFrontDoorBench(*bench);
  RegisterBystanderBench(*bench);
  RegisterSpecBench(*bench);
  RegisterHandoffBench(*bench);
  RegisterPrefillBench(*bench);
  RegisterAgenticBench(*bench);
}

}  // namespace tandem::cli
