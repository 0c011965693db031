// Rotary position embedding angles for every position, from the model config:
// plain, linear-scaled or YaRN. Angles are computed in double and rounded to
// fp32 once, so the table is the same on every machine.
#pragma once

#include <vector>

#include "model/config.h"

namespace tandem {

class RopeTable {
 public:
  explicit RopeTable(const ModelConfig& config);
  int rot_dims() const { return rot_dims_; }
  // Writes rot_dims/2 cosines and sines for position pos.
  void Angles(int64_t pos, float* cos, float* sin) const;

 private:
  int rot_dims_;
  std::vector<double> inv_freq_;  // effective angle per position, per pair
  double mscale_ = 1.0;           // YaRN magnitude correction
};

}  // namespace tandem
