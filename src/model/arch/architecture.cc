#include "model/arch/architecture.h"

#include <utility>

#include "model/arch/deepseek32.h"
#include "model/arch/llama.h"
#include "model/arch/qwen3.h"

namespace tandem {
namespace {

// Every general.architecture value tandem computes, in the order errors list them.
const std::pair<const char*, const Architecture&>* Known(size_t* n) {
  static const std::pair<const char*, const Architecture&> known[] = {
      {"llama", LlamaArchitecture()},  {"mistral", LlamaArchitecture()},
      {"qwen2", Qwen2Architecture()},  {"qwen3", Qwen3Architecture()},
      {"deepseek32", Deepseek32Architecture()},
  };
  *n = std::size(known);
  return known;
}

}  // namespace

const Architecture* FindArchitecture(const std::string& name) {
  size_t n = 0;
  const auto* known = Known(&n);
  for (size_t i = 0; i < n; ++i) {
    if (name == known[i].first) return &known[i].second;
  }
  return nullptr;
}

std::string ArchitectureNames() {
  size_t n = 0;
  const auto* known = Known(&n);
  std::string names;
  for (size_t i = 0; i < n; ++i) names += (i ? (i + 1 == n ? " and " : ", ") : "") + std::string(known[i].first);
  return names;
}

}  // namespace tandem
