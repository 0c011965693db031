// The kernel ISAs this CPU runs, for tests that compare every path, and a
// guard that puts the best one back when the test ends.
#pragma once

#include <vector>

#include "kernels/cpu.h"

namespace tandem::testing {

inline std::vector<kernels::Isa> SupportedIsas() {
  std::vector<kernels::Isa> isas;
  for (kernels::Isa i : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (kernels::IsaSupported(i)) isas.push_back(i);
  }
  return isas;
}

class IsaRestorer {
 public:
  ~IsaRestorer() { kernels::SetIsa(kernels::BestSupportedIsa()); }
};

}  // namespace tandem::testing
