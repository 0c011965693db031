#include "model/rope.h"

#include <algorithm>
#include <cmath>

namespace tandem {
namespace {

// Dimension pair index whose wavelength completes `rotations` turns over the
// original context (YaRN's correction range).
double CorrectionDim(int rot_dims, double original_context, double rotations, double base) {
  return rot_dims * std::log(original_context / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

RopeTable::RopeTable(const ModelConfig& c) : rot_dims_(int(c.rope_dims)) {
  const int half = rot_dims_ / 2;
  inv_freq_.resize(size_t(half));
  const double scale = c.rope_scaling == RopeScaling::kNone ? 1.0 : 1.0 / c.rope_factor;
  double low = 0, high = 0;
  if (c.rope_scaling == RopeScaling::kYarn) {
    const double orig = double(c.rope_original_context);
    low = std::max(0.0, std::floor(CorrectionDim(rot_dims_, orig, c.yarn_beta_fast, c.rope_theta)));
    high = std::min(double(rot_dims_ - 1),
                    std::ceil(CorrectionDim(rot_dims_, orig, c.yarn_beta_slow, c.rope_theta)));
    // Where the attention scale takes the correction (deepseek32), the rotation keeps magnitude 1.
    mscale_ = c.yarn_scales_attention ? 1.0 : 1.0 + 0.1 * std::log(c.rope_factor);
  }
  for (int i = 0; i < half; ++i) {
    const double base_freq = std::pow(c.rope_theta, -2.0 * i / rot_dims_);
    double f = base_freq * scale;
    if (c.rope_scaling == RopeScaling::kYarn) {
      // Blend interpolation (long wavelengths) with extrapolation (short ones).
      const double y = (i - low) / std::max(0.001, high - low);
      const double extrapolate = 1.0 - std::clamp(y, 0.0, 1.0);
      f = base_freq * scale * (1.0 - extrapolate) + base_freq * extrapolate;
    }
    inv_freq_[size_t(i)] = f;
  }
}

void RopeTable::Angles(int64_t pos, float* cos, float* sin) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const double theta = double(pos) * inv_freq_[i];
    cos[i] = float(std::cos(theta) * mscale_);
    sin[i] = float(std::sin(theta) * mscale_);
  }
}

}  // namespace tandem
