#include "faults/numerics_variant.h"

#include <cmath>

#include "kernels/cpu.h"

namespace tandem::faults {
namespace {

using kernels::KernelTable;

const KernelTable* g_base = nullptr;  // set once, before any kernel runs (InstallNumericsVariant)
KernelTable g_variant;
bool g_coarse = false;  // "coarse" rather than "ulp"

void NudgeRows(float* y, int64_t y_stride, int n_tokens, int64_t r0, int64_t r1) {
  for (int t = 0; t < n_tokens; ++t) {
    for (int64_t r = r0; r < r1; ++r) {
      if (r % 8 != 3) continue;
      float& v = y[t * y_stride + r];
      if (!std::isfinite(v) || v == 0.0f) continue;
      v = g_coarse ? v * (1.0f - 1.0f / 4096.0f) : std::nextafter(v, 0.0f);
    }
  }
}

void MatMulRows(const kernels::WeightMatrix& w, const float* x, int64_t x_stride, int n_tokens, float* y,
                int64_t y_stride, int64_t r0, int64_t r1) {
  g_base->matmul_rows(w, x, x_stride, n_tokens, y, y_stride, r0, r1);
  NudgeRows(y, y_stride, n_tokens, r0, r1);
}

void MatMulRowsQ(const kernels::WeightMatrix& w, const kernels::QuantizedActs& x, int n_tokens, float* y,
                 int64_t y_stride, int64_t r0, int64_t r1) {
  g_base->matmul_rows_q(w, x, n_tokens, y, y_stride, r0, r1);
  NudgeRows(y, y_stride, n_tokens, r0, r1);
}

}  // namespace

const char* NumericsVariantNames() { return "ulp, coarse"; }

Status InstallNumericsVariant(const std::string& name) {
  if (name != "ulp" && name != "coarse") {
    return InvalidArgument("unknown numerics variant '" + name + "' (known: " + NumericsVariantNames() + ")");
  }
  kernels::InstallVariant(nullptr, nullptr);  // back to the ISA's own table, then wrap it
  g_base = &kernels::Active();
  g_variant = *g_base;
  g_variant.matmul_rows = MatMulRows;
  g_variant.matmul_rows_q = MatMulRowsQ;
  g_coarse = name == "coarse";
  kernels::InstallVariant(&g_variant, g_coarse ? "debug-coarse" : "debug-ulp");
  return Status::Ok();
}

}  // namespace tandem::faults
