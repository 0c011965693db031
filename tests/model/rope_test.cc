#include "model/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tandem {
namespace {

ModelConfig BaseConfig() {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_dims = 64;
  c.rope_theta = 10000.0;
  c.context_length = 4096;
  c.rope_original_context = 4096;
  return c;
}

TEST(Rope, LinearScalingDividesThePosition) {
  ModelConfig plain = BaseConfig(), scaled = BaseConfig();
  scaled.rope_scaling = RopeScaling::kLinear;
  scaled.rope_factor = 2.0;
  RopeTable a(plain), b(scaled);
  std::vector<float> ca(32), sa(32), cb(32), sb(32);
  a.Angles(50, ca.data(), sa.data());
  b.Angles(100, cb.data(), sb.data());
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(ca[size_t(i)], cb[size_t(i)], 1e-6);
    EXPECT_NEAR(sa[size_t(i)], sb[size_t(i)], 1e-6);
  }
}

TEST(Rope, YarnKeepsFastDimsInterpolatesSlowOnesAndScalesMagnitude) {
  ModelConfig plain = BaseConfig(), yarn = BaseConfig();
  yarn.rope_scaling = RopeScaling::kYarn;
  yarn.rope_factor = 4.0;
  RopeTable a(plain), b(yarn);
  const double mscale = 1.0 + 0.1 * std::log(4.0);
  std::vector<float> ca(32), sa(32), cb(32), sb(32), cq(32), sq(32);
  const int64_t pos = 37;
  a.Angles(pos, ca.data(), sa.data());
  b.Angles(pos, cb.data(), sb.data());
  // Fastest pair: extrapolated, same angle as unscaled, magnitude mscale.
  EXPECT_NEAR(cb[0], ca[0] * mscale, 1e-5);
  EXPECT_NEAR(sb[0], sa[0] * mscale, 1e-5);
  // Slowest pair: interpolated, the unscaled angle at pos / factor.
  a.Angles(pos, cq.data(), sq.data());
  const double slow = double(pos) / 4.0 * std::pow(10000.0, -2.0 * 31 / 64);
  EXPECT_NEAR(cb[31], std::cos(slow) * mscale, 1e-5);
  EXPECT_NEAR(sb[31], std::sin(slow) * mscale, 1e-5);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(cb[size_t(i)] * cb[size_t(i)] + sb[size_t(i)] * sb[size_t(i)], mscale * mscale, 1e-4);
  }
}

}  // namespace
}  // namespace tandem
