// The tensor element types tandem reads, and ggml's names for all the others
// (so an unsupported file is refused by name).
#include "kernels/quant_blocks.h"
#include "model/gguf.h"

namespace tandem {

const char* TensorTypeName(TensorType t) {
  switch (t) {
    case TensorType::kF32: return "F32";
    case TensorType::kF16: return "F16";
    case TensorType::kQ4_0: return "Q4_0";
    case TensorType::kQ5_0: return "Q5_0";
    case TensorType::kQ8_0: return "Q8_0";
    case TensorType::kQ4_K: return "Q4_K";
    case TensorType::kQ5_K: return "Q5_K";
    case TensorType::kQ6_K: return "Q6_K";
    case TensorType::kBF16: return "BF16";
  }
  return "?";
}

std::string GgmlTypeName(uint32_t type) {
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2", "Q4_3",   "Q5_0",   "Q5_1",   "Q8_0",  "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",    "Q5_K",  "Q6_K", "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",   "IQ4_XS", "I8",  "I16",    "I32",    "I64",    "F64",   "IQ1_M",
      "BF16",    "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8",
      "IQ4_NL_8_8", "MXFP4"};
  if (type < sizeof(kNames) / sizeof(kNames[0])) return kNames[type];
  return "";
}

std::string SupportedTensorTypes() { return "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K and Q6_K"; }

bool TensorTypeBlock(uint32_t type, uint64_t* block_elems, uint64_t* block_bytes) {
  auto set = [&](uint64_t e, uint64_t b) {
    *block_elems = e;
    *block_bytes = b;
    return true;
  };
  switch (TensorType(type)) {
    case TensorType::kF32: return set(1, 4);
    case TensorType::kF16: return set(1, 2);
    case TensorType::kBF16: return set(1, 2);
    case TensorType::kQ8_0: return set(kQ8Block, kQ8BlockBytes);
    case TensorType::kQ4_0: return set(32, kernels::kQ4_0BlockBytes);
    case TensorType::kQ5_0: return set(32, kernels::kQ5_0BlockBytes);
    case TensorType::kQ4_K: return set(kernels::kSuperBlock, kernels::kQ4KBlockBytes);
    case TensorType::kQ5_K: return set(kernels::kSuperBlock, kernels::kQ5KBlockBytes);
    case TensorType::kQ6_K: return set(kernels::kSuperBlock, kernels::kQ6KBlockBytes);
  }
  return false;
}

}  // namespace tandem
