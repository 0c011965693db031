#include "kernels/cpu.h"

#include <cpuid.h>

#include "common/status.h"

namespace tandem::kernels {
namespace {

// CPUID.1:ECX bit 29. (Clang's __builtin_cpu_supports does not know "f16c".)
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

const KernelTable* TableFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return &Avx512Table();
    case Isa::kAvx2: return &Avx2Table();
    case Isa::kScalar: return &ScalarTable();
  }
  return &ScalarTable();
}

struct Selection {
  Isa isa = BestSupportedIsa();
  const KernelTable* table = TableFor(isa);
  const char* variant = "";
};

Selection& Current() {
  static Selection s;
  return s;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

std::optional<Isa> ParseIsa(std::string_view name) {
  if (name == "scalar") return Isa::kScalar;
  if (name == "avx2") return Isa::kAvx2;
  if (name == "avx512") return Isa::kAvx512;
  return std::nullopt;
}

bool IsaSupported(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
    case Isa::kAvx512:
      return IsaSupported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq");
  }
  return false;
}

Isa BestSupportedIsa() {
  if (IsaSupported(Isa::kAvx512)) return Isa::kAvx512;
  if (IsaSupported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

void SetIsa(Isa isa) {
  TANDEM_CHECK_MSG(IsaSupported(isa), IsaName(isa));
  Current().isa = isa;
  Current().table = TableFor(isa);
  Current().variant = "";
}

void InstallVariant(const KernelTable* table, const char* name) {
  const bool reset = table == nullptr || name == nullptr || *name == '\0';
  Current().table = reset ? TableFor(Current().isa) : table;
  Current().variant = reset ? "" : name;
}

const char* ActiveVariant() { return Current().variant; }

Isa ActiveIsa() { return Current().isa; }
const KernelTable& Active() { return *Current().table; }

}  // namespace tandem::kernels
