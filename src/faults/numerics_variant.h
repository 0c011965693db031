// TESTS ONLY: kernels that round differently, standing for another build of
// tandem (invariant 9). A variant is installed process-wide
// (kernels::InstallVariant) and named in the numerics identity, so the
// process reports an identity no clean build has; what it computes is as
// deterministic as the build's own kernels (each output element's value
// depends only on its row and its input), it just differs in the last bits,
// the way a changed reduction order does.
//
//   "ulp":    every matrix product's outputs of rows r with r % 8 == 3 are
//             moved one ulp toward zero (the size of a reordered sum's change);
//   "coarse": those outputs are scaled by 1 - 2^-12 instead, which flips
//             greedy near-ties often enough for short tests to see drift.
#pragma once

#include <string>

#include "common/status.h"

namespace tandem::faults {

// The names InstallNumericsVariant accepts, for help texts: "ulp, coarse".
const char* NumericsVariantNames();

// Installs the variant over the active ISA's kernels. REQUIRES: after the ISA
// is chosen (kernels::SetIsa), before any kernel runs on another thread.
Status InstallNumericsVariant(const std::string& name);

}  // namespace tandem::faults
