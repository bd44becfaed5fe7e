// RoPE frequency tables (backend::make_rope_table) and the rope op, against hand computations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace deepinfer::backend {
namespace {

void expect_rel_near(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), rel * std::fabs(want)) << what << ": got " << got << " want " << want;
}

TEST(RopeTable, DefaultRopeTheta10000Dim16) {
  model::RopeParams p;
  p.theta = 10000.0;
  const RopeTable t = make_rope_table(p, 16);
  EXPECT_EQ(t.rope_dim, 16);
  EXPECT_EQ(t.attention_factor, 1.0f);
  ASSERT_EQ(t.inv_freq.size(), 8u);
  for (int i = 0; i < 8; ++i)
    expect_rel_near(t.inv_freq[i], std::pow(10000.0, -2.0 * i / 16.0), 1e-6, "inv_freq[" + std::to_string(i) + "]");
  // Hand values: i = 0 -> 1, i = 4 -> 10000^-0.5 = 0.01.
  EXPECT_EQ(t.inv_freq[0], 1.0f);
  expect_rel_near(t.inv_freq[4], 0.01, 1e-6, "inv_freq[4]");
  // Strictly decreasing.
  for (int i = 1; i < 8; ++i) EXPECT_LT(t.inv_freq[i], t.inv_freq[i - 1]);
}

TEST(RopeTable, YarnTheta160000Factor16) {
  model::RopeParams p;
  p.theta = 160000.0;
  p.yarn = true;
  p.factor = 16.0;
  p.original_max_position_embeddings = 65536.0;
  p.beta_fast = 32.0;
  p.beta_slow = 1.0;
  p.attention_factor = 1.0;
  const int dim = 64;
  // docs §4.4: low = floor(64 ln(65536/(32*2pi)) / (2 ln 160000)), high = ceil(64 ln(65536/(2pi)) / (2 ln 160000)).
  const double low_raw = dim * std::log(65536.0 / (32.0 * 2.0 * M_PI)) / (2.0 * std::log(160000.0));
  const double high_raw = dim * std::log(65536.0 / (1.0 * 2.0 * M_PI)) / (2.0 * std::log(160000.0));
  const double low = std::floor(low_raw), high = std::ceil(high_raw);
  ASSERT_EQ(low, 15.0) << low_raw;
  ASSERT_EQ(high, 25.0) << high_raw;

  const RopeTable t = make_rope_table(p, dim);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  EXPECT_EQ(t.attention_factor, 1.0f);
  for (int i = 0; i < 32; ++i) {
    const double f = std::pow(160000.0, -2.0 * i / dim);
    const double ramp = std::clamp((i - 15.0) / (25.0 - 15.0), 0.0, 1.0);
    const double want = f * (1.0 - ramp) + (f / 16.0) * ramp;
    expect_rel_near(t.inv_freq[i], want, 1e-6, "yarn inv_freq[" + std::to_string(i) + "]");
  }
  // Below the ramp: unscaled; above: exactly /16; in the middle (i = 20): half-way blend.
  expect_rel_near(t.inv_freq[15], std::pow(160000.0, -30.0 / 64), 1e-6, "i=15 unscaled");
  expect_rel_near(t.inv_freq[25], std::pow(160000.0, -50.0 / 64) / 16, 1e-6, "i=25 interpolated");
  expect_rel_near(t.inv_freq[20], std::pow(160000.0, -40.0 / 64) * (0.5 + 0.5 / 16), 1e-6, "i=20 blend");
}

TEST(RopeTable, YarnAttentionFactorIsCarried) {
  model::RopeParams p;
  p.theta = 10000.0;
  p.yarn = true;
  p.factor = 4.0;
  p.original_max_position_embeddings = 4096;
  p.attention_factor = 1.25;
  EXPECT_EQ(make_rope_table(p, 8).attention_factor, 1.25f);
}

TEST(RopeOp, RotatesTrailingInterleavedPairsAndInverts) {
  auto be = make_cpu_backend();
  model::RopeParams p;
  p.theta = 10000.0;
  const RopeTable t = make_rope_table(p, 4);  // inv_freq {1, 0.01}
  const int heads = 2, head_dim = 6;
  std::vector<float> x = {9, 8, 1, 2, 3, 4,  // head 0: dims 0,1 untouched; pairs (1,2), (3,4)
                          7, 6, -1, 0.5f, 2, -3};
  const std::vector<float> orig = x;
  const int64_t pos[1] = {3};
  be->rope(x.data(), 1, heads, head_dim, pos, t, false);
  for (int h = 0; h < heads; ++h) {
    const float* o = orig.data() + h * head_dim;
    const float* v = x.data() + h * head_dim;
    EXPECT_EQ(v[0], o[0]);
    EXPECT_EQ(v[1], o[1]);
    for (int i = 0; i < 2; ++i) {
      const double ang = 3.0 * std::pow(10000.0, -2.0 * i / 4);
      const double a = o[2 + 2 * i], b = o[3 + 2 * i];
      EXPECT_NEAR(v[2 + 2 * i], a * std::cos(ang) - b * std::sin(ang), 1e-5) << h << "," << i;
      EXPECT_NEAR(v[3 + 2 * i], b * std::cos(ang) + a * std::sin(ang), 1e-5) << h << "," << i;
    }
  }
  be->rope(x.data(), 1, heads, head_dim, pos, t, true);
  for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(x[k], orig[k], 1e-5) << k;
}

}  // namespace
}  // namespace deepinfer::backend
