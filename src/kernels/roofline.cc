#include "kernels/roofline.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/thread_pool.h"
#include "kernels/cpu.h"

namespace tandem::kernels {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int64_t FmaLoopFlopsPerIter(bool avx512) { return 12 * (avx512 ? 16 : 8) * 2; }

Roofline MeasureRoofline(ThreadPool& threads) {
  const bool wide = IsaSupported(Isa::kAvx512);
  Roofline r;
  const int64_t n = int64_t(1) << 28;  // 1 GiB of floats
  std::unique_ptr<float, void (*)(void*)> buf(
      static_cast<float*>(std::aligned_alloc(64, size_t(n) * 4)), &std::free);
  std::memset(buf.get(), 1, size_t(n) * 4);
  volatile float sink = 0;
  const int tasks = threads.size();
  const int64_t per = n / tasks / 64 * 64;
  for (int pass = 0; pass < 4; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    threads.ParallelFor(tasks, [&](int t) {
      const float* p = buf.get() + t * per;
      sink = sink + (wide ? StreamReadAvx512(p, per) : StreamReadAvx2(p, per));
    });
    r.read_gbps = std::max(r.read_gbps, double(per * tasks) * 4 / Seconds(t0) / 1e9);
  }
  // Single-threaded memcpy of 256 MiB for reference.
  const int64_t half = n / 4;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(buf.get() + half * 2, buf.get(), size_t(half) * 4);
    r.memcpy_gbps = std::max(r.memcpy_gbps, double(half) * 4 / Seconds(t0) / 1e9);
  }
  const int64_t iters = 20'000'000;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    threads.ParallelFor(tasks, [&](int) { sink = sink + (wide ? FmaLoopAvx512(iters) : FmaLoopAvx2(iters)); });
    r.fma_gflops = std::max(
        r.fma_gflops, double(iters) * double(FmaLoopFlopsPerIter(wide)) * tasks / Seconds(t0) / 1e9);
  }
  return r;
}

}  // namespace tandem::kernels
