// `tandem bench model`: prefill and decode speed of one model (a preset
// generated in memory, or any GGUF file) at several context lengths, dense
// and sparse, against the machine's FMA peak and read bandwidth measured in
// the same run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::bench {

struct ModelBenchOptions {
  std::string preset = "100m";
  std::string model_path;  // instead of the preset
  std::vector<std::string> types = {"f32", "f16"};
  std::vector<int64_t> contexts = {512, 4096};
  std::vector<std::string> attention = {"dense", "sparse"};
  std::vector<std::string> kv_dtypes = {"f16"};
  int64_t top_k = 2048;
  int threads = 2;
  int chunk_tokens = 512;
  int decode_tokens = 32;
  int repeat = 1;            // rounds per point; medians are reported
  std::string llama_bench;   // llama.cpp's llama-bench, run on the same file between tandem's rounds
};

int RunModelBench(const ModelBenchOptions& a);

}  // namespace tandem::bench
