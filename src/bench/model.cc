#include "bench/model.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "bench/llama_bench_runner.h"
#include "common/aligned.h"
#include "common/env.h"
#include "kernels/cpu.h"
#include "kernels/quant_dot.h"
#include "kernels/roofline.h"
#include "model/arch/architecture.h"
#include "model/forward.h"
#include "model/presets.h"

namespace tandem::bench {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Whether the model's feed-forward matrices take integer dot products
// (kernels/quant_dot.h): its prefill is then measured against the int8 peak.
bool IntegerModel(const Model& m) { return kernels::UsesIntegerDot(m.weights().ffn_type); }

double MatmulFlopsPerToken(const ModelConfig& c) { return c.arch().MatmulFlopsPerToken(c); }

// Attention FLOPs of a token attending to `entries` positions.
double AttentionFlops(const ModelConfig& c, int64_t entries) {
  return c.arch().AttentionFlopsPerEntry(c) * double(entries);
}

struct Point {
  double prefill_tps = 0, prefill_gflops = 0, decode_tps = 0, decode_gbps = 0;
};

StatusOr<Point> BenchPoint(const Model& m, ThreadPool& threads, const AttentionOptions& attention,
                 int64_t context, const ModelBenchOptions& a) {
  const ModelConfig& c = m.config();
  const int64_t total = context + a.decode_tokens;
  TANDEM_ASSIGN_OR_RETURN(const CacheSpec spec, MakeCacheSpec(c, attention));
  PagePool pool(spec.registry, int(c.n_layers), (total + kPageTokens - 1) / kPageTokens);
  TANDEM_ASSIGN_OR_RETURN(const std::vector<int32_t> pages, pool.Allocate(pool.total_pages()));
  ForwardPass fwd(m, spec, threads);
  std::vector<int32_t> tokens(static_cast<size_t>(context));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 7919 + 3) % size_t(c.vocab_size));
  std::vector<float> logits;
  const int chunk = int(std::min<int64_t>(a.chunk_tokens, context));
  // Warm-up: one chunk-sized pass sizes the activations and faults in memory.
  SequenceChunk warm{std::span<const int32_t>(tokens).first(size_t(chunk)), 0, pages, false};
  if (Status st = fwd.Run({&warm, 1}, pool, &logits); !st.ok()) return st;
  double attention_flops = 0;
  const int64_t top_k = attention.kind == AttentionKind::kSparse ? attention.top_k : INT64_MAX;
  for (int64_t t = 0; t < context; ++t) attention_flops += AttentionFlops(c, std::min(t + 1, top_k));
  auto t0 = Env::Default().Now();
  for (int64_t start = 0; start < context; start += chunk) {
    const size_t len = size_t(std::min<int64_t>(chunk, context - start));
    SequenceChunk piece{std::span<const int32_t>(tokens).subspan(size_t(start), len), start, pages, false};
    logits.clear();
    TANDEM_RETURN_IF_ERROR(fwd.Run({&piece, 1}, pool, &logits));
  }
  const double prefill_s = Env::Default().SecondsSince(t0);
  Point p;
  p.prefill_tps = double(context) / prefill_s;
  p.prefill_gflops = (MatmulFlopsPerToken(c) * double(context) + attention_flops) / prefill_s / 1e9;
  int32_t next = 1;
  t0 = Env::Default().Now();
  for (int i = 0; i < a.decode_tokens; ++i) {
    SequenceChunk step{std::span<const int32_t>(&next, 1), context + i, pages, false};
    logits.clear();
    TANDEM_RETURN_IF_ERROR(fwd.Run({&step, 1}, pool, &logits));
    next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const double decode_s = Env::Default().SecondsSince(t0);
  p.decode_tps = a.decode_tokens / decode_s;
  // Bytes one decode step must read: the weight matrices it uses, the cache rows it
  // attends to (K and V, or the latent), and with sparse attention every index key.
  const CacheBufferRegistry& r = spec.registry;
  const double kv_row = double(spec.AttendedBytesPerToken());
  const double index_row =
      attention.kind == AttentionKind::kSparse && spec.index_k >= 0 ? double(r.spec(spec.index_k).BytesPerToken()) : 0;
  const int64_t mid = context + a.decode_tokens / 2;
  const double per_token = double(m.weights().matrix_bytes) +
                           double(c.n_layers) * (kv_row * double(std::min(mid, top_k)) + index_row * double(mid));
  p.decode_gbps = per_token * p.decode_tps / 1e9;
  pool.Release(pages);
  return p;
}

struct LoadedModel {
  // A generated preset's file (the model reads it in place), its tensors as
  // cache-line aligned as a mapped file's.
  std::vector<uint8_t, AlignedAllocator<uint8_t>> bytes;
  std::unique_ptr<Model> model;
};

StatusOr<LoadedModel> BenchModel(const ModelBenchOptions& a, const std::string& type_name) {
  LoadedModel m;
  if (!a.model_path.empty()) {
    TANDEM_ASSIGN_OR_RETURN(m.model, Model::Load(a.model_path));
    return m;
  }
  TANDEM_ASSIGN_OR_RETURN(ModelPreset preset, FindPreset(a.preset));
  const int64_t longest = *std::max_element(a.contexts.begin(), a.contexts.end());
  preset.context_length = std::max(preset.context_length, longest + a.decode_tokens);
  TANDEM_ASSIGN_OR_RETURN(MatrixTypes types, ParseMatrixTypes(type_name));
  TANDEM_ASSIGN_OR_RETURN(GgufWriter writer, BuildRandomModel(preset, types, 1));
  const std::vector<uint8_t> file = writer.Serialize();
  m.bytes.assign(file.begin(), file.end());
  TANDEM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::Parse(m.bytes));
  TANDEM_ASSIGN_OR_RETURN(m.model, Model::FromGguf(std::move(gguf)));
  return m;
}

}  // namespace

int RunModelBench(const ModelBenchOptions& a) {
  ThreadPool threads(a.threads);
  std::vector<AttentionOptions> variants;
  for (const std::string& kv : a.kv_dtypes) {
    for (const std::string& kind : a.attention) {
      auto options = ParseAttentionOptions(kind, "fp8", a.top_k, kv);
      if (!options.ok()) {
        std::fprintf(stderr, "error: %s\n", options.status().ToString().c_str());
        return 1;
      }
      variants.push_back(*options);
    }
  }
  std::printf("measuring the machine (memory read bandwidth, FMA peak) with %d threads...\n", threads.size());
  const kernels::Roofline roof = kernels::MeasureRoofline(threads);
  std::printf("  DRAM read %.1f GB/s | FMA peak %.1f GFLOP/s | int8 %.1f GOP/s (vpmaddubsw+vpmaddwd)", roof.read_gbps,
              roof.fma_gflops, roof.int8_gops);
  if (roof.int8_vnni_gops > 0) std::printf(", %.1f GOP/s (VNNI vpdpbusd: the int8 peak)", roof.int8_vnni_gops);
  std::printf(" | kernels %s\n\n", kernels::IsaName(kernels::ActiveIsa()));
  const double int8_peak = roof.int8_vnni_gops > 0 ? roof.int8_vnni_gops : roof.int8_gops;
  if (!a.llama_bench.empty() && a.model_path.empty()) {
    std::fprintf(stderr, "error: --llama-bench needs -m FILE (llama.cpp runs the same file)\n");
    return 1;
  }
  std::printf("%-10s %-5s %-6s %-4s %7s | %10s %9s %7s | %9s %9s %7s | %s\n", "model", "type", "attn", "kv",
              "context", "prefill/s", "GFLOP/s", "of peak", "decode/s", "GB/s", "of DRAM", "of int8 peak");
  const std::vector<std::string> types = a.model_path.empty() ? a.types : std::vector<std::string>{"file"};
  for (const std::string& type_name : types) {
    auto loaded = BenchModel(a, type_name);
    if (!loaded.ok()) {
      std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str());
      return 1;
    }
    const Model& model = *loaded->model;
    const std::string label = a.model_path.empty() ? a.preset : "file";
    for (int64_t context : a.contexts) {
      for (const AttentionOptions& v : variants) {
        // Rounds interleaved with llama.cpp's (dense rows: its attention), medians of each.
        const bool foreign = !a.llama_bench.empty() && v.kind == AttentionKind::kDense;
        std::vector<double> pre, pre_gf, dec, dec_gb, dec_share, theirs_pre, theirs_dec;
        for (int round = 0; round < a.repeat; ++round) {
          // This machine's read bandwidth now: on a shared host it moves by
          // 2x within a minute, so each round's decode is held against a
          // measurement taken just before it.
          const double read_now = kernels::MeasureReadBandwidth(threads, int64_t(256) << 20, 2);
          auto point = BenchPoint(model, threads, v, context, a);
          if (!point.ok()) {
            std::fprintf(stderr, "error: %s\n", point.status().ToString().c_str());
            return 1;
          }
          pre.push_back(point->prefill_tps);
          pre_gf.push_back(point->prefill_gflops);
          dec.push_back(point->decode_tps);
          dec_gb.push_back(point->decode_gbps);
          dec_share.push_back(point->decode_gbps / read_now);
          if (!foreign) continue;
          auto theirs = RunLlamaBench(a.llama_bench, a.model_path, context, a.decode_tokens, threads.size());
          if (!theirs.ok()) {
            std::fprintf(stderr, "error: llama-bench: %s\n", theirs.status().ToString().c_str());
            return 1;
          }
          theirs_pre.push_back(theirs->prefill_tps);
          theirs_dec.push_back(theirs->decode_tps);
        }
        const double gflops = Median(pre_gf);
        char int8[32] = "-";
        if (IntegerModel(model)) std::snprintf(int8, sizeof int8, "%.0f%%", 100.0 * gflops / int8_peak);
        std::printf("%-10s %-5s %-6s %-4s %7lld | %10.1f %9.1f %6.0f%% | %9.2f %9.2f %6.0f%% | %s\n",
                    label.c_str(), type_name.c_str(), v.kind == AttentionKind::kSparse ? "sparse" : "dense",
                    CacheDTypeName(v.kv_dtype), (long long)context, Median(pre), gflops,
                    100.0 * gflops / roof.fma_gflops, Median(dec), Median(dec_gb), 100.0 * Median(dec_share), int8);
        if (foreign) {
          std::printf("%-10s %-5s %-6s %-4s %7lld | %10.1f %17s | %9.2f %17s | tandem/llama.cpp: prefill %.2fx, decode %.2fx\n",
                      "llama.cpp", "file", "fa", "f16", (long long)context, Median(theirs_pre), "",
                      Median(theirs_dec), "", Median(pre) / Median(theirs_pre), Median(dec) / Median(theirs_dec));
        }
        std::fflush(stdout);
      }
    }
  }
  std::printf("\nprefill: a prompt of `context` tokens in chunks of %d (GFLOP/s counts matmul and attention FLOPs);\n"
              "decode: %d greedy steps after it; GB/s = weight bytes plus the K/V rows attended, per token x tokens/s;\n"
              "of DRAM: that against a read-bandwidth pass (256 MiB) just before the round (the model's bytes may sit\n"
              "partly in the last-level cache, so more than 100%% is possible);\n"
              "sparse: the lightning indexer's top-%lld positions once the context exceeds them;\n"
              "of int8 peak: the same operations against the int8 peak, for models whose matrices take integer dot products;\n"
              "medians of %d round(s)%s.\n",
              a.chunk_tokens, a.decode_tokens, (long long)a.top_k, a.repeat,
              a.llama_bench.empty() ? "" : ", each followed by llama-bench's pp<context> and tg<decode> at depth <context> on the same file");
  return 0;
}

}  // namespace tandem::bench
