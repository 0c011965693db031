#include "common/splitmix.h"
#include "model/presets.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "common/half.h"
#include "model/default_vocab.h"
#include "model/arch/deepseek32_config.h"
#include "model/quantize.h"

namespace tandem {
namespace {

constexpr uint64_t kDefaultSeed = 20261129;

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// Uniform values with standard deviation `std`, a pure function of (seed, name, index).
std::vector<float> RandomValues(uint64_t seed, const std::string& name, size_t n, float std) {
  std::vector<float> v(n);
  const uint64_t base = SplitMix64(seed ^ HashName(name));
  const float half_width = std * 1.7320508f;  // uniform on [-a, a] has std a / sqrt(3)
  for (size_t i = 0; i < n; ++i) {
    const float u = float(SplitMix64(base + i) >> 40) * (1.0f / 16777216.0f);
    v[i] = (2.0f * u - 1.0f) * half_width;
  }
  return v;
}

void EncodeQ8(const std::vector<float>& x, std::vector<uint8_t>& out) {
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b + i]));
    const uint16_t d16 = FloatToF16(amax / 127.0f);
    const float d = F16ToFloat(d16);
    out.push_back(uint8_t(d16 & 0xff));
    out.push_back(uint8_t(d16 >> 8));
    for (size_t i = 0; i < 32; ++i) {
      const float q = d == 0.0f ? 0.0f : std::nearbyint(x[b + i] / d);
      out.push_back(uint8_t(int8_t(std::clamp(q, -127.0f, 127.0f))));
    }
  }
}

}  // namespace

const std::vector<ModelPreset>& ModelPresets() {
  static const std::vector<ModelPreset> presets = {
      // micro: the cheapest model per token of context that can still show a
      // stale cache read, for the incident-shape sweep at 32k+ tokens: one KV
      // head (so one index head), and two layers, because with one layer a
      // wrong attention output reaches no later cache row (a stale index-K
      // read in a prompt's first chunk never shows once a later chunk
      // samples: measured, 0 of 2240 rounds corrupt at 16 and 48 sessions).
      {"micro", 64, 2, 2, 1, 128, 4096, 65536},
      {"tiny", 128, 4, 4, 2, 384, 1024, 4096},
      {"small", 384, 6, 6, 2, 1024, 4096, 4096},
      {"100m", 768, 12, 12, 4, 3072, 4096, 4096},
      // deepseek32, with the real model's cache rows (a 512 + 64 latent, a
      // 128-dim index key) and everything else small: dsa-tiny has one dense
      // layer and two of 4 experts (2 used, from 1 of 2 groups, plus a
      // shared one); dsa-small 6 layers of 8 experts in 4 groups.
      {"dsa-tiny", 256, 3, 4, 1, 512, 1024, 4096, {128, 512, 32, 64, 32, 4, 128, 64, 1, 4, 2, 1, 128, 2, 1}},
      {"dsa-small", 512, 6, 8, 1, 1024, 4096, 8192, {256, 512, 64, 64, 64, 8, 128, 256, 1, 8, 2, 1, 256, 4, 2}},
  };
  return presets;
}

StatusOr<ModelPreset> FindPreset(const std::string& name) {
  std::string known;
  for (const ModelPreset& p : ModelPresets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  return InvalidArgument("unknown model preset '" + name + "' (known: " + known + ")");
}

StatusOr<TensorType> ParseTensorType(const std::string& name) {
  if (name == "f32") return TensorType::kF32;
  if (name == "f16") return TensorType::kF16;
  if (name == "bf16") return TensorType::kBF16;
  if (name == "q8_0") return TensorType::kQ8_0;
  if (name == "q4_0") return TensorType::kQ4_0;
  if (name == "q5_0") return TensorType::kQ5_0;
  if (name == "q4_k") return TensorType::kQ4_K;
  if (name == "q5_k") return TensorType::kQ5_K;
  if (name == "q6_k") return TensorType::kQ6_K;
  return InvalidArgument("unknown tensor type '" + name + "' (f32, f16, bf16, q8_0, q4_0, q5_0, q4_k, q5_k, q6_k)");
}

std::vector<uint8_t> EncodeTensor(const std::vector<float>& values, TensorType type) {
  std::vector<uint8_t> out;
  switch (type) {
    case TensorType::kF32:
      out.resize(values.size() * 4);
      std::memcpy(out.data(), values.data(), out.size());
      break;
    case TensorType::kF16:
    case TensorType::kBF16:
      out.reserve(values.size() * 2);
      for (float f : values) {
        const uint16_t h = type == TensorType::kF16 ? FloatToF16(f) : FloatToBf16(f);
        out.push_back(uint8_t(h & 0xff));
        out.push_back(uint8_t(h >> 8));
      }
      break;
    case TensorType::kQ8_0:
      out.reserve(values.size() / 32 * 34);
      EncodeQ8(values, out);
      break;
    case TensorType::kQ4_0:
    case TensorType::kQ5_0:
    case TensorType::kQ4_K:
    case TensorType::kQ5_K:
    case TensorType::kQ6_K:
      QuantizeBlocks(type, values.data(), int64_t(values.size()), out);
      break;
  }
  return out;
}

StatusOr<MatrixTypes> ParseMatrixTypes(const std::string& name) {
  if (name == "q4_k_m") return MatrixTypes{TensorType::kQ4_K, TensorType::kQ6_K};
  auto t = ParseTensorType(name);
  if (!t.ok()) return InvalidArgument(t.status().message() + std::string(" or q4_k_m"));
  return MatrixTypes{*t, *t};
}

namespace {

// Metadata and tensors under llama.cpp's deepseek32 names and shapes.
StatusOr<GgufWriter> BuildRandomDsaModel(const ModelPreset& p, MatrixTypes types, uint64_t seed) {
  const DsaShape& d = p.dsa;
  const std::string a = "deepseek32";
  GgufWriter w;
  w.SetString("general.architecture", a);
  w.SetString("general.name", "tandem-" + p.name);
  auto u32 = [&](const std::string& key, int64_t v) { w.SetUint32(a + "." + key, uint32_t(v)); };
  u32("context_length", p.context_length);
  u32("embedding_length", p.dim);
  u32("block_count", p.n_layers);
  u32("feed_forward_length", p.ffn_dim);
  u32("attention.head_count", p.n_heads);
  u32("attention.head_count_kv", 1);
  u32("attention.key_length", d.kv_lora_rank + d.qk_rope_dim);  // the absorbed form's cache row
  u32("attention.value_length", d.kv_lora_rank);
  u32("attention.key_length_mla", d.qk_nope_dim + d.qk_rope_dim);
  u32("attention.value_length_mla", d.v_head_dim);
  u32("attention.q_lora_rank", d.q_lora_rank);
  u32("attention.kv_lora_rank", d.kv_lora_rank);
  u32("attention.indexer.head_count", d.index_heads);
  u32("attention.indexer.key_length", d.index_dim);
  u32("attention.indexer.top_k", d.index_top_k);
  u32("rope.dimension_count", d.qk_rope_dim);
  u32("leading_dense_block_count", d.leading_dense);
  u32("expert_count", d.n_experts);
  u32("expert_used_count", d.n_experts_used);
  u32("expert_shared_count", d.n_shared_experts);
  u32("expert_feed_forward_length", d.expert_ffn_dim);
  u32("expert_group_count", d.n_expert_groups);
  u32("expert_group_used_count", d.n_expert_groups_used);
  u32("expert_gating_func", int64_t(ExpertGating::kSigmoid));
  u32("vocab_size", p.vocab_size);
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
  w.SetFloat32(a + ".rope.freq_base", 10000.0f);
  w.SetFloat32(a + ".expert_weights_scale", 2.5f);
  w.SetBool(a + ".expert_weights_norm", true);
  WriteDefaultTokenizer(BuildDefaultVocab(int32_t(p.vocab_size)), w);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetBool("tokenizer.ggml.add_eos_token", false);
  w.SetString("tokenizer.chat_template", kPresetChatTemplate);
  // dims[0] is the row length; std 0: all ones (norm weights); F32 vectors.
  auto add = [&](const std::string& name, std::vector<uint64_t> dims, float std, TensorType t) {
    uint64_t n = 1;
    for (uint64_t x : dims) n *= x;
    std::vector<float> v = std == 0.0f ? std::vector<float>(size_t(n), 1.0f) : RandomValues(seed, name, size_t(n), std);
    uint64_t block = 1, block_bytes = 0;
    TensorTypeBlock(uint32_t(t), &block, &block_bytes);
    if (dims[0] % block != 0) t = dims[0] % kQ8Block == 0 ? TensorType::kQ8_0 : TensorType::kF16;
    return w.AddTensor(name, t, dims, EncodeTensor(v, t));
  };
  auto std_for = [](int64_t cols) { return 1.0f / std::sqrt(float(cols)); };
  const TensorType type = types.main, sensitive = types.sensitive, f32 = TensorType::kF32;
  using D = std::vector<uint64_t>;
  auto u = [](int64_t x) { return uint64_t(x); };
  TANDEM_RETURN_IF_ERROR(add("token_embd.weight", {u(p.dim), u(p.vocab_size)}, 1.0f, type));
  TANDEM_RETURN_IF_ERROR(add("output_norm.weight", {u(p.dim)}, 0.0f, f32));
  TANDEM_RETURN_IF_ERROR(add("output.weight", {u(p.dim), u(p.vocab_size)}, std_for(p.dim), sensitive));
  const int64_t qk = d.qk_nope_dim + d.qk_rope_dim, shared = d.expert_ffn_dim * d.n_shared_experts;
  for (int64_t l = 0; l < p.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const D norms[] = {{u(p.dim)}, {u(p.dim)}, {u(d.q_lora_rank)}, {u(d.kv_lora_rank)}, {u(d.index_dim)}};
    const char* norm_names[] = {"attn_norm", "ffn_norm", "attn_q_a_norm", "attn_kv_a_norm", "indexer.k_norm"};
    for (int i = 0; i < 5; ++i) TANDEM_RETURN_IF_ERROR(add(b + norm_names[i] + ".weight", norms[i], 0.0f, f32));
    TANDEM_RETURN_IF_ERROR(add(b + "indexer.k_norm.bias", {u(d.index_dim)}, 0.1f, f32));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_q_a.weight", {u(p.dim), u(d.q_lora_rank)}, std_for(p.dim), type));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_q_b.weight", {u(d.q_lora_rank), u(p.n_heads * qk)}, std_for(d.q_lora_rank), type));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_kv_a_mqa.weight", {u(p.dim), u(d.kv_lora_rank + d.qk_rope_dim)},
                               std_for(p.dim), type));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_k_b.weight", {u(d.qk_nope_dim), u(d.kv_lora_rank), u(p.n_heads)},
                               std_for(d.qk_nope_dim), type));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_v_b.weight", {u(d.kv_lora_rank), u(d.v_head_dim), u(p.n_heads)},
                               std_for(d.kv_lora_rank), sensitive));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_output.weight", {u(p.n_heads * d.v_head_dim), u(p.dim)},
                               std_for(p.n_heads * d.v_head_dim), type));
    TANDEM_RETURN_IF_ERROR(add(b + "indexer.attn_q_b.weight", {u(d.q_lora_rank), u(d.index_heads * d.index_dim)},
                               std_for(d.q_lora_rank), type));
    TANDEM_RETURN_IF_ERROR(add(b + "indexer.attn_k.weight", {u(p.dim), u(d.index_dim)}, std_for(p.dim), type));
    TANDEM_RETURN_IF_ERROR(add(b + "indexer.proj.weight", {u(p.dim), u(d.index_heads)}, std_for(p.dim), type));
    if (l < d.leading_dense) {
      TANDEM_RETURN_IF_ERROR(add(b + "ffn_gate.weight", {u(p.dim), u(p.ffn_dim)}, std_for(p.dim), type));
      TANDEM_RETURN_IF_ERROR(add(b + "ffn_up.weight", {u(p.dim), u(p.ffn_dim)}, std_for(p.dim), type));
      TANDEM_RETURN_IF_ERROR(add(b + "ffn_down.weight", {u(p.ffn_dim), u(p.dim)}, std_for(p.ffn_dim), sensitive));
      continue;
    }
    TANDEM_RETURN_IF_ERROR(add(b + "ffn_gate_inp.weight", {u(p.dim), u(d.n_experts)}, std_for(p.dim), f32));
    TANDEM_RETURN_IF_ERROR(add(b + "exp_probs_b.bias", {u(d.n_experts)}, 0.1f, f32));
    const D in_exps = {u(p.dim), u(d.expert_ffn_dim), u(d.n_experts)};
    TANDEM_RETURN_IF_ERROR(add(b + "ffn_gate_exps.weight", in_exps, std_for(p.dim), type));
    TANDEM_RETURN_IF_ERROR(add(b + "ffn_up_exps.weight", in_exps, std_for(p.dim), type));
    TANDEM_RETURN_IF_ERROR(add(b + "ffn_down_exps.weight", {u(d.expert_ffn_dim), u(p.dim), u(d.n_experts)},
                               std_for(d.expert_ffn_dim), sensitive));
    if (shared > 0) {
      TANDEM_RETURN_IF_ERROR(add(b + "ffn_gate_shexp.weight", {u(p.dim), u(shared)}, std_for(p.dim), type));
      TANDEM_RETURN_IF_ERROR(add(b + "ffn_up_shexp.weight", {u(p.dim), u(shared)}, std_for(p.dim), type));
      TANDEM_RETURN_IF_ERROR(add(b + "ffn_down_shexp.weight", {u(shared), u(p.dim)}, std_for(shared), sensitive));
    }
  }
  return w;
}

}  // namespace

StatusOr<GgufWriter> BuildRandomModel(const ModelPreset& p, MatrixTypes types, uint64_t seed,
                                      const std::string& a) {
  if (p.architecture() == "deepseek32") {
    if (a != "llama" && a != "deepseek32") {
      return InvalidArgument("preset '" + p.name + "' is a deepseek32 model, not " + a);
    }
    return BuildRandomDsaModel(p, types, seed);
  }
  if (a != "llama" && a != "qwen2" && a != "qwen3") {
    return InvalidArgument("mkmodel architecture must be llama, qwen2 or qwen3, not '" + a + "'");
  }
  GgufWriter w;
  w.SetString("general.architecture", a);
  w.SetString("general.name", "tandem-" + p.name);
  w.SetUint32(a + ".context_length", uint32_t(p.context_length));
  w.SetUint32(a + ".embedding_length", uint32_t(p.dim));
  w.SetUint32(a + ".block_count", uint32_t(p.n_layers));
  w.SetUint32(a + ".feed_forward_length", uint32_t(p.ffn_dim));
  w.SetUint32(a + ".attention.head_count", uint32_t(p.n_heads));
  w.SetUint32(a + ".attention.head_count_kv", uint32_t(p.n_kv_heads));
  w.SetFloat32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetFloat32(a + ".rope.freq_base", 10000.0f);
  // qwen3's heads are wider than dim / heads (128 at dim 1024 and 16 heads in
  // the released models): its files say so in key_length, and so do these.
  const int64_t hd = (a == "qwen3" ? 2 : 1) * p.dim / p.n_heads, kv = p.n_kv_heads * hd;
  w.SetUint32(a + ".rope.dimension_count", uint32_t(hd));
  if (a == "qwen3") {
    w.SetUint32(a + ".attention.key_length", uint32_t(hd));
    w.SetUint32(a + ".attention.value_length", uint32_t(hd));
  }
  w.SetUint32(a + ".vocab_size", uint32_t(p.vocab_size));
  WriteDefaultTokenizer(BuildDefaultVocab(int32_t(p.vocab_size)), w);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetBool("tokenizer.ggml.add_eos_token", false);
  w.SetString("tokenizer.chat_template", kPresetChatTemplate);
  const float s = 1.0f / std::sqrt(float(p.dim));
  auto add = [&](const std::string& name, int64_t cols, int64_t rows, float std, TensorType t) {
    std::vector<float> v = std == 0.0f ? std::vector<float>(size_t(cols * rows), 1.0f)
                                   : RandomValues(seed, name, size_t(cols * rows), std);
    std::vector<uint64_t> dims = rows == 1 ? std::vector<uint64_t>{uint64_t(cols)}
                                           : std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)};
    uint64_t block = 1, block_bytes = 0;
    TensorTypeBlock(uint32_t(t), &block, &block_bytes);
    if (uint64_t(cols) % block != 0) t = cols % kQ8Block == 0 ? TensorType::kQ8_0 : TensorType::kF16;
    return w.AddTensor(name, t, dims, EncodeTensor(v, t));
  };
  const TensorType type = types.main, sensitive = types.sensitive;
  TANDEM_RETURN_IF_ERROR(add("token_embd.weight", p.dim, p.vocab_size, 1.0f, type));
  TANDEM_RETURN_IF_ERROR(add("output_norm.weight", p.dim, 1, 0.0f, TensorType::kF32));
  TANDEM_RETURN_IF_ERROR(add("output.weight", p.dim, p.vocab_size, s, sensitive));
  for (int64_t l = 0; l < p.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    TANDEM_RETURN_IF_ERROR(add(b + "attn_norm.weight", p.dim, 1, 0.0f, TensorType::kF32));
    TANDEM_RETURN_IF_ERROR(add(b + "ffn_norm.weight", p.dim, 1, 0.0f, TensorType::kF32));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_q.weight", p.dim, p.n_heads * hd, s, type));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_k.weight", p.dim, kv, s, type));
    TANDEM_RETURN_IF_ERROR(add(b + "attn_v.weight", p.dim, kv, s, sensitive));
    if (a == "qwen2") {
      TANDEM_RETURN_IF_ERROR(add(b + "attn_q.bias", p.n_heads * hd, 1, 0.1f, TensorType::kF32));
      TANDEM_RETURN_IF_ERROR(add(b + "attn_k.bias", kv, 1, 0.1f, TensorType::kF32));
      TANDEM_RETURN_IF_ERROR(add(b + "attn_v.bias", kv, 1, 0.1f, TensorType::kF32));
    }
    if (a == "qwen3") {  // per-head norms near 1, each dimension its own weight
      for (const char* norm : {"attn_q_norm.weight", "attn_k_norm.weight"}) {
        std::vector<float> v = RandomValues(seed, b + norm, size_t(hd), 0.2f);
        for (float& x : v) x += 1.0f;
        TANDEM_RETURN_IF_ERROR(w.AddTensor(b + norm, TensorType::kF32, {uint64_t(hd)}, EncodeTensor(v, TensorType::kF32)));
      }
    }
    TANDEM_RETURN_IF_ERROR(add(b + "attn_output.weight", p.n_heads * hd, p.dim, s, type));
    TANDEM_RETURN_IF_ERROR(add(b + "ffn_gate.weight", p.dim, p.ffn_dim, s, type));
    TANDEM_RETURN_IF_ERROR(add(b + "ffn_up.weight", p.dim, p.ffn_dim, s, type));
    TANDEM_RETURN_IF_ERROR(add(b + "ffn_down.weight", p.ffn_dim, p.dim,
                               1.0f / std::sqrt(float(p.ffn_dim)), sensitive));
  }
  return w;
}

Status WriteRandomModel(const ModelPreset& preset, MatrixTypes types, uint64_t seed,
                        const std::string& path, const std::string& architecture) {
  TANDEM_ASSIGN_OR_RETURN(GgufWriter w, BuildRandomModel(preset, types, seed, architecture));
  return w.WriteFile(path);
}

StatusOr<std::string> EnsureDefaultModel() {
  std::string home;
  if (const char* env = std::getenv("TANDEM_HOME"); env && *env) {
    home = env;
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    home = std::string(h) + "/.cache/tandem";
  } else {
    home = "/tmp/tandem";
  }
  // v2: the chat template is the Llama-2 shape below (v1's rendered system turns as answers).
  // v3: the same model with its tensors 64-byte aligned (GgufWriter's default), so the matmul
  // kernels' loads of a mapped row do not straddle cache lines.
  const std::string path = home + "/models/default-small-f32-v3.gguf";
  if (std::filesystem::exists(path)) return path;
  std::error_code ec;
  std::filesystem::create_directories(home + "/models", ec);
  if (ec) return Unavailable("cannot create '" + home + "/models': " + ec.message());
  TANDEM_ASSIGN_OR_RETURN(ModelPreset preset, FindPreset("small"));
  TANDEM_RETURN_IF_ERROR(WriteRandomModel(preset, MatrixTypes{}, kDefaultSeed, path));
  return path;
}

}  // namespace tandem
