// The machine's physical limits, measured in the same run as a benchmark so
// results are reported as ratios: DRAM read bandwidth and FMA peak.
#pragma once

#include <cstdint>
#include <utility>

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
// Runs `iters` rounds of 12 independent chains of 8-bit multiply-adds: the
// kernels' vpmaddubsw + vpmaddwd + vpaddd (64 or 32 multiply-adds a chain a
// round), or VNNI's vpdpbusd (64). REQUIRES for Vnni: Int8VnniSupported().
float Int8LoopAvx512(int64_t iters);
float Int8LoopAvx2(int64_t iters);
float Int8LoopVnni(int64_t iters);
bool Int8VnniSupported();

struct Roofline {
  double read_gbps = 0;       // all threads streaming a buffer much larger than caches
  double fma_gflops = 0;      // all threads, widest supported FMA
  double memcpy_gbps = 0;     // single thread, for reference
  // 8-bit integer multiply-adds, as operations (2 a multiply-add), all threads:
  double int8_gops = 0;       // the kernels' instructions (vpmaddubsw + vpmaddwd), widest supported
  double int8_vnni_gops = 0;  // vpdpbusd where the CPU has AVX-512 VNNI (0 otherwise): the machine's int8 peak
};

// Best of `passes` multi-threaded passes over a buffer of `bytes` (much larger
// than the caches), in GB/s. Allocates and touches the buffer once per call.
double MeasureReadBandwidth(ThreadPool& threads, int64_t bytes = int64_t(1) << 30, int passes = 4);
double MeasureMemcpyBandwidth(int64_t bytes = int64_t(256) << 20, int passes = 3);
double MeasureFmaPeak(ThreadPool& threads);
// {the kernels' int8 instructions, VNNI (0 without it)}, in GOP/s.
std::pair<double, double> MeasureInt8Peak(ThreadPool& threads);

// All of them; takes ~1-2 s.
Roofline MeasureRoofline(ThreadPool& threads);

}  // namespace tandem::kernels
