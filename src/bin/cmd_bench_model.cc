// `tandem bench model`: its flags (the benchmark: bench/model.h).
#include "bin/commands.h"
#include "bin/shared_flags.h"
#include "bin/model_options.h"
#include "bench/model.h"

namespace tandem::cli {

using bench::ModelBenchOptions;

void RegisterModelBench(CLI::App& bench) {
  auto args = std::make_shared<ModelBenchOptions>();
  CLI::App* model = bench.add_subcommand("model", "Prefill and decode speed vs. FMA peak and DRAM bandwidth, by context length");
  AddModelPreset(model, &args->preset);
  model->add_option("-m,--model", args->model_path, "A GGUF file instead of a preset");
  model->add_option("--types", args->types, "Weight types of the preset to compare (any mkmodel --type, e.g. q4_k_m)")->delimiter(',');
  model->add_option("--context", args->contexts, "Context lengths")->delimiter(',')->check(CLI::Range(8, 1 << 20));
  model->add_option("--attention", args->attention, "dense, sparse or both")->delimiter(',');
  model->add_option("--kv-dtype", args->kv_dtypes, "K/V cache dtypes: f32, f16, bf16")->delimiter(',');
  model->add_option("--topk", args->top_k, "Sparse attention's top-k")->check(CLI::Range(1, 1 << 24));
  AddThreads(model, &args->threads);
  model->add_option("--chunk-tokens", args->chunk_tokens, "Prefill chunk")->check(CLI::Range(1, 1 << 16));
  model->add_option("--decode-tokens", args->decode_tokens, "Decode steps")->check(CLI::Range(1, 1 << 16));
  AddRepeat(model, &args->repeat);
  model->add_option("--llama-bench", args->llama_bench,
                    "llama.cpp's llama-bench binary: run on the same file (-m) after each round, with the same threads, "
                    "and reported beside tandem's dense rows as ratios");
  model->callback([args] { SetExitCode(bench::RunModelBench(*args)); });
}

}  // namespace tandem::cli
