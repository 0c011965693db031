// Run-time ISA selection. The best ISA the CPU supports is chosen at start-up;
// tests and benchmarks may force a lower one to prove all paths agree.
#pragma once

#include <optional>
#include <string_view>

#include "kernels/kernel_table.h"

namespace tandem::kernels {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* IsaName(Isa isa);
std::optional<Isa> ParseIsa(std::string_view name);
Isa BestSupportedIsa();
bool IsaSupported(Isa isa);
// Selects the kernels to use from now on. REQUIRES: IsaSupported(isa); not
// called while other threads run kernels.
void SetIsa(Isa isa);
Isa ActiveIsa();
const KernelTable& Active();

// Installs another table under a name that enters the numerics identity
// (model/numerics.h): the fault library's debug variants, which stand for a
// build whose kernels round differently. "" and nullptr go back to the ISA's
// own table. REQUIRES: after SetIsa; not called while other threads run
// kernels; `table` outlives its use.
void InstallVariant(const KernelTable* table, const char* name);
// "" unless a variant is installed.
const char* ActiveVariant();

}  // namespace tandem::kernels
