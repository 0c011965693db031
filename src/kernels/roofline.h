// The machine's physical limits, measured in the same run as a benchmark so
// results are reported as ratios: DRAM read bandwidth and FMA peak.
#pragma once

#include <cstdint>

namespace tandem {
class ThreadPool;
}

namespace tandem::kernels {

// Sums `n` floats with wide loads (n % 64 == 0); the result only defeats
// dead-code elimination.
float StreamReadAvx512(const float* data, int64_t n);
float StreamReadAvx2(const float* data, int64_t n);
// Runs `iters` rounds of independent FMA chains; returns a value to keep.
float FmaLoopAvx512(int64_t iters);
float FmaLoopAvx2(int64_t iters);
int64_t FmaLoopFlopsPerIter(bool avx512);

struct Roofline {
  double read_gbps = 0;       // all threads streaming a buffer much larger than caches
  double fma_gflops = 0;      // all threads, widest supported FMA
  double memcpy_gbps = 0;     // single thread, for reference
};

// Best of `passes` multi-threaded passes over a buffer of `bytes` (much larger
// than the caches), in GB/s. Allocates and touches the buffer once per call.
double MeasureReadBandwidth(ThreadPool& threads, int64_t bytes = int64_t(1) << 30, int passes = 4);
double MeasureMemcpyBandwidth(int64_t bytes = int64_t(256) << 20, int passes = 3);
double MeasureFmaPeak(ThreadPool& threads);

// All three; takes ~1-2 s.
Roofline MeasureRoofline(ThreadPool& threads);

}  // namespace tandem::kernels
