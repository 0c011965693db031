// Kernel micro-benchmarks: matmul in decode (1 token) and prefill (64 tokens)
// shapes per weight type, single-threaded, with bytes/s counters so they read
// against a plain streaming read measured in the same run.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "common/aligned.h"
#include "common/thread_pool.h"
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "kernels/quant_pack.h"
#include "kernels/roofline.h"
#include "model/presets.h"

namespace tandem {
namespace {

constexpr int64_t kRows = 3072, kCols = 768;
constexpr int64_t kMatrices = 16;  // 16 distinct matrices so weights come from DRAM, not cache

// Cache-line aligned, as the forward pass's activations and a mapped model's rows are.
AlignedFloats Values(size_t n) {
  AlignedFloats v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(int(i * 2654435761u % 2001) - 1000) / 1000.0f;
  return v;
}

void BM_MatMul(benchmark::State& state, TensorType file_type, kernels::WeightType type) {
  const int n_tok = int(state.range(0));
  static std::vector<uint8_t, AlignedAllocator<uint8_t>> bytes[4];
  auto& b = bytes[int(type)];
  if (b.empty()) {
    const AlignedFloats values = Values(size_t(kRows * kCols));
    const auto one = EncodeTensor(std::vector<float>(values.begin(), values.end()), file_type);
    b.resize(one.size() * kMatrices);
    for (int m = 0; m < kMatrices; ++m) std::memcpy(b.data() + m * one.size(), one.data(), one.size());
  }
  const size_t matrix_bytes = b.size() / kMatrices;
  // Block-quantized matrices are packed once, as a model packs them at load.
  static std::vector<kernels::PackedWeights> packings[4];
  auto& packed = packings[int(type)];
  if (packed.empty()) {
    for (int i = 0; i < kMatrices; ++i) {
      packed.emplace_back(kernels::WeightMatrix{type, b.data() + i * matrix_bytes, kRows, kCols, matrix_bytes / kRows});
    }
  }
  const auto x = Values(size_t(n_tok * kCols));
  std::vector<float> y(size_t(n_tok * kRows));
  int64_t m = 0;
  for (auto _ : state) {
    const int64_t i = m++ % kMatrices;
    kernels::WeightMatrix w{type, b.data() + i * matrix_bytes, kRows, kCols, matrix_bytes / kRows,
                            packed[size_t(i)].data()};
    kernels::Active().matmul_rows(w, x.data(), kCols, n_tok, y.data(), kRows, 0, kRows);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(matrix_bytes));
  state.counters["GFLOP/s"] = benchmark::Counter(double(state.iterations()) * 2.0 * kRows * kCols * n_tok / 1e9,
                                                 benchmark::Counter::kIsRate);
}

// The decode shape as the forward pass runs it: rows split across 2 threads.
void BM_MatMulTwoThreads(benchmark::State& state) {
  static ThreadPool pool(2);
  static AlignedFloats w = Values(size_t(kRows * kCols * kMatrices));
  const auto x = Values(size_t(kCols));
  std::vector<float> y(static_cast<size_t>(kRows));
  int64_t m = 0;
  for (auto _ : state) {
    kernels::WeightMatrix wm{kernels::WeightType::kF32,
                             reinterpret_cast<const uint8_t*>(w.data() + (m++ % kMatrices) * kRows * kCols),
                             kRows, kCols, size_t(kCols) * 4};
    pool.ParallelFor(2, [&](int t) {
      kernels::Active().matmul_rows(wm, x.data(), kCols, 1, y.data(), kRows, t * kRows / 2, (t + 1) * kRows / 2);
    });
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kRows * kCols * 4);
}

void BM_StreamReadTwoThreads(benchmark::State& state) {
  static ThreadPool pool(2);
  const int64_t n = int64_t(1) << 26;
  static std::vector<float> buf(size_t(n), 1.0f);
  for (auto _ : state) {
    pool.ParallelFor(2, [&](int t) {
      benchmark::DoNotOptimize(kernels::StreamReadAvx512(buf.data() + t * n / 2, n / 2));
    });
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 4);
}

void BM_StreamRead(benchmark::State& state) {
  const int64_t n = int64_t(1) << 26;  // 256 MiB
  static std::vector<float> buf(size_t(n), 1.0f);
  for (auto _ : state) {
    benchmark::DoNotOptimize(kernels::IsaSupported(kernels::Isa::kAvx512)
                                 ? kernels::StreamReadAvx512(buf.data(), n)
                                 : kernels::StreamReadAvx2(buf.data(), n));
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * n * 4);
}

// Attention of `queries` consecutive tokens ending at position ctx - 1 (1: a
// decode step; 32: one prefill unit of ForwardPass), 100m-preset heads.
void BM_Attention(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  const int queries = int(state.range(1));
  const int heads = 12, kv_heads = 4, hd = 64;
  AlignedFloats k = Values(size_t(ctx * kv_heads * hd)), v = k;
  AlignedFloats q = Values(size_t(queries * heads * hd));
  std::vector<int32_t> pages(size_t((ctx + 63) / 64));
  for (size_t i = 0; i < pages.size(); ++i) pages[i] = int32_t(i);
  kernels::PagedRows rk{reinterpret_cast<uint8_t*>(k.data()), pages.data(), 64 * kv_heads * hd * 4,
                        kv_heads * hd * 4, 64};
  kernels::PagedRows rv = rk;
  rv.base = reinterpret_cast<uint8_t*>(v.data());
  const kernels::AttentionShape shape{heads, kv_heads, hd, 0.125f};
  std::vector<float> scratch(size_t(kernels::AttentionScratchFloats(queries, shape)));
  std::vector<float> out(q.size());
  std::vector<int64_t> entries(static_cast<size_t>(queries));
  for (int i = 0; i < queries; ++i) entries[size_t(i)] = ctx - queries + 1 + i;
  const kernels::AttentionQueries qs{q.data(), heads * hd, out.data(), heads * hd, entries.data(), queries};
  for (auto _ : state) {
    kernels::Attention(qs, rk, rv, nullptr, shape, scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  const double macs = 2.0 * heads * hd * double(ctx) * queries;  // QK and PV
  state.counters["GFLOP/s"] = benchmark::Counter(double(state.iterations()) * 2.0 * macs / 1e9,
                                                 benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_StreamRead)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamReadTwoThreads)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_MatMulTwoThreads)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatMul, f32, TensorType::kF32, kernels::WeightType::kF32)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatMul, f16, TensorType::kF16, kernels::WeightType::kF16)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatMul, bf16, TensorType::kBF16, kernels::WeightType::kBF16)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MatMul, q8_0, TensorType::kQ8_0, kernels::WeightType::kQ8_0)->Arg(1)->Arg(64)->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Attention)->Args({512, 1})->Args({4096, 1})->Args({4096, 32})->Args({16384, 32})->Unit(benchmark::kMicrosecond);

}  // namespace tandem
