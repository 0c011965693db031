#include "kernels/roofline.h"

#include <algorithm>
#include <atomic>
#include <vector>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <tuple>

#include "common/env.h"
#include "common/thread_pool.h"
#include "kernels/cpu.h"

namespace tandem::kernels {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(Env::Default().Now() - t0).count();
}

}  // namespace

int64_t FmaLoopFlopsPerIter(bool avx512) { return 12 * (avx512 ? 16 : 8) * 2; }

double MeasureReadBandwidth(ThreadPool& threads, int64_t bytes, int passes) {
  const bool wide = IsaSupported(Isa::kAvx512);
  const int64_t n = bytes / 4;
  std::unique_ptr<float, void (*)(void*)> buf(
      static_cast<float*>(std::aligned_alloc(64, size_t(n) * 4)), &std::free);
  std::memset(buf.get(), 1, size_t(n) * 4);
  const int tasks = threads.size();
  const int64_t per = n / tasks / 64 * 64;
  double best = 0;
  std::atomic<uint32_t> sink{0};
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = Env::Default().Now();
    threads.ParallelFor(tasks, [&](int t) {
      const float* p = buf.get() + t * per;
      const float s = wide ? StreamReadAvx512(p, per) : StreamReadAvx2(p, per);
      sink.fetch_add(uint32_t(s));
    });
    best = std::max(best, double(per * tasks) * 4 / Seconds(t0) / 1e9);
  }
  return best;
}

double MeasureMemcpyBandwidth(int64_t bytes, int passes) {
  std::vector<uint8_t> src(size_t(bytes), 1), dst(size_t(bytes), 0);
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto t0 = Env::Default().Now();
    std::memcpy(dst.data(), src.data(), src.size());
    best = std::max(best, double(bytes) / Seconds(t0) / 1e9);
  }
  return best;
}

double MeasureFmaPeak(ThreadPool& threads) {
  const bool wide = IsaSupported(Isa::kAvx512);
  const int64_t iters = 20'000'000;
  const int tasks = threads.size();
  std::atomic<uint32_t> sink{0};
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = Env::Default().Now();
    threads.ParallelFor(tasks, [&](int) {
      sink.fetch_add(uint32_t(wide ? FmaLoopAvx512(iters) : FmaLoopAvx2(iters)));
    });
    best = std::max(best, double(iters) * double(FmaLoopFlopsPerIter(wide)) * tasks / Seconds(t0) / 1e9);
  }
  return best;
}

bool Int8VnniSupported() { return IsaSupported(Isa::kAvx512) && __builtin_cpu_supports("avx512vnni"); }

std::pair<double, double> MeasureInt8Peak(ThreadPool& threads) {
  const bool wide = IsaSupported(Isa::kAvx512), vnni = Int8VnniSupported();
  const int64_t iters = 20'000'000;
  const int tasks = threads.size();
  std::atomic<uint32_t> sink{0};
  auto best_of = [&](auto loop, double ops_per_iter) {
    double best = 0;
    for (int pass = 0; pass < 3; ++pass) {
      const auto t0 = Env::Default().Now();
      threads.ParallelFor(tasks, [&](int) { sink.fetch_add(uint32_t(int64_t(loop(iters)))); });
      best = std::max(best, double(iters) * ops_per_iter * tasks / Seconds(t0) / 1e9);
    }
    return best;
  };
  const double lanes = wide ? 64 : 32;  // multiply-adds per chain per round
  const double kernels = wide ? best_of(Int8LoopAvx512, 12 * lanes * 2) : best_of(Int8LoopAvx2, 12 * lanes * 2);
  const double peak = vnni ? best_of(Int8LoopVnni, 12 * 64 * 2) : 0.0;
  return {kernels, peak};
}

Roofline MeasureRoofline(ThreadPool& threads) {
  Roofline r;
  r.read_gbps = MeasureReadBandwidth(threads);
  r.memcpy_gbps = MeasureMemcpyBandwidth();
  r.fma_gflops = MeasureFmaPeak(threads);
  std::tie(r.int8_gops, r.int8_vnni_gops) = MeasureInt8Peak(threads);
  return r;
}

}  // namespace tandem::kernels
