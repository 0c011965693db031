// The numerics identity (invariant 9): one value that changes whenever
// anything that decides a token's bits changes, so a verdict can say what it
// is able to prove. Two runs of equal identity give the same tokens for the
// same request (invariant 5), so the oracle judges them exactly; runs of
// different identities (another build, a mixed deployment, an old transcript)
// can only be judged by the reference's log-probabilities (drift or not).
//
// Its parts: this build's numerics version (below), the kernel variant in use
// (kernels/cpu.h: "" except under the fault library's debug variants), the
// model's weights identity (model.h), the attention mode and top-k, every
// registered cache buffer's dtype (K/V, index-K, the MLA latent), and the
// chat format. The ISA is not a part: every ISA
// gives the same bits (kernels/kernel_table.h), and the golden-output test
// holds each machine that runs it to that.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "model/cache_spec.h"
#include "model/model.h"

namespace tandem {

// Bump whenever a change moves any token's bits on purpose: a kernel's
// reduction order, an activation's quantization, a sampler's arithmetic, a
// forward pass's op order. tests/model/golden_test.cc fails when the golden
// outputs change and this did not (its README says how to regenerate them).
//   1: the first identity (2026-12-03): integer dot products for the K-quants.
//   2: (2026-12-04) the K-quants' integer dot products keep 8 fp32 lanes per
//      output (kernels/quant_dot.h), no horizontal sum per block.
//   3: (2026-12-04) every block-quantized type (Q8_0, Q4_0, Q5_0 too) by
//      integer dot products, one exact integer per block and one fp32
//      accumulator per output (kernels/quant_dot.h), row-interleaved kernels.
inline constexpr int kNumericsVersion = 3;

struct NumericsIdentity {
  int version = 0;             // kNumericsVersion of the build that computed
  std::string kernel_variant;  // "" : the build's own kernels
  std::string weights;         // 16 hex digits: a digest of WeightsIdentity
  std::string attention;       // AttentionFingerprint ("attention=sparse:top_k=64")
  std::string cache;           // every registered buffer, "name:dtype" joined by ',' ("k:f16,v:f16,index_k:bf16")
  std::string chat_format;     // ChatFormat::Identity()
  // A decode server that admits prefill engines of other numerics
  // (--allow-mixed-numerics): its answers equal no colocated run exactly,
  // so its identity equals no engine's.
  bool mixed = false;

  // "n<version>-<16 hex digits>": a digest of every part.
  std::string Id() const;
  // {"id", "version", "kernel_variant", "weights", "attention", "cache", "chat_format", "mixed"}
  nlohmann::json ToJson() const;
  // Reads what ToJson wrote; the id must match the parts (a hand-edited header is refused).
  static StatusOr<NumericsIdentity> FromJson(const nlohmann::json& j);
  // What the handshake compares besides the layout and the weights: the
  // version and the kernel variant, as a keyed fingerprint
  // (common/keyed_fingerprint.h) so a refusal names the part that differs.
  std::string HandshakeFingerprint() const;
  // "version ('3' here, '2' there) and weights (...)": the parts that differ, for messages.
  std::string Differences(const NumericsIdentity& other) const;
  bool operator==(const NumericsIdentity&) const = default;
};

// This build's HandshakeFingerprint under the active kernels (it depends on
// nothing else), for every Hello an engine or a test sends.
std::string HandshakeNumerics();

// The identity of `model` with the cache `spec` under this build's active kernels.
NumericsIdentity ComputeNumericsIdentity(const Model& model, const CacheSpec& spec);

}  // namespace tandem
