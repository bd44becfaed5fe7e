// Rounding steps of release numerics against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/numerics.h"

namespace deepinfer::model {
namespace {

TEST(Numerics, Names) {
  EXPECT_EQ(*numerics_from_name("exact"), Numerics::kExact);
  EXPECT_EQ(*numerics_from_name("release"), Numerics::kRelease);
  EXPECT_FALSE(numerics_from_name("fp8").has_value());
  EXPECT_STREQ(numerics_name(Numerics::kRelease), "release");
}

TEST(Numerics, Bf16RoundsToNearestEven) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even (1 + 2^-6).
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
}

TEST(Numerics, E4m3Grid) {
  EXPECT_EQ(round_e4m3(0.0f), 0.0f);
  EXPECT_EQ(round_e4m3(448.0f), 448.0f);
  EXPECT_EQ(round_e4m3(1000.0f), 448.0f);     // saturates
  EXPECT_EQ(round_e4m3(-1000.0f), -448.0f);
  EXPECT_EQ(round_e4m3(1.0625f), 1.0f);       // halfway 1 .. 1.125: ties to even mantissa (1.0)
  EXPECT_EQ(round_e4m3(1.1875f), 1.25f);      // halfway 1.125 .. 1.25: ties to even (1.25)
  EXPECT_EQ(round_e4m3(1.1f), 1.125f);
  EXPECT_EQ(round_e4m3(300.0f), 288.0f);      // quantum 32 in [256, 448]: 288 nearer than 320
  EXPECT_EQ(round_e4m3(-3.3f), -3.25f);
  // Subnormals: step 2^-9; 2^-10 is a tie between 0 and 2^-9 and goes to 0 (even).
  EXPECT_EQ(round_e4m3(std::ldexp(1.0f, -9)), std::ldexp(1.0f, -9));
  EXPECT_EQ(round_e4m3(std::ldexp(1.0f, -10)), 0.0f);
  EXPECT_EQ(round_e4m3(std::ldexp(3.0f, -10)), std::ldexp(1.0f, -8));  // 1.5 * 2^-9: tie -> 2 * 2^-9
}

TEST(Numerics, E2m1GridTiesToEven) {
  const float in[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f, -0.3f, 2.9f};
  const float want[] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f, 6.0f, -0.5f, 3.0f};
  for (size_t i = 0; i < std::size(in); ++i) EXPECT_EQ(round_e2m1(in[i]), want[i]) << in[i];
}

TEST(Numerics, PowerOfTwoCeilScale) {
  EXPECT_EQ(pow2_ceil_scale(448.0f, 1.0f / 448.0f), 1.0f);  // exactly 1 (448 * fp32(1/448) rounds to 1)
  EXPECT_EQ(pow2_ceil_scale(449.0f, 1.0f / 448.0f), 2.0f);
  EXPECT_EQ(pow2_ceil_scale(100.0f, 1.0f / 448.0f), 0.25f);  // 100/448 = 0.223 -> 2^-2
  EXPECT_EQ(pow2_ceil_scale(6.0f, 1.0f / 6.0f), 1.0f);
  EXPECT_EQ(pow2_ceil_scale(7.0f, 1.0f / 6.0f), 2.0f);
}

TEST(Numerics, Fp8RoundTripPerBlock) {
  // Block 1: amax 100 -> scale 2^-2; 1.1 / 0.25 = 4.4 -> e4m3 4.5 -> 1.125. Block 2: all zero.
  std::vector<float> x = {100.0f, 1.1f, -0.3f, 50.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  fp8_round_trip(x.data(), 8, 4);
  EXPECT_EQ(x[0], 96.0f);    // 400 -> quantum 32 in [256, 448]: a tie between 384 and 416 -> even (384) * 0.25
  EXPECT_EQ(x[1], 1.125f);
  EXPECT_EQ(x[2], -0.3125f);  // -1.2 -> -1.25 -> -0.3125
  EXPECT_EQ(x[3], 48.0f);     // 200 -> quantum 16: 192 or 208; 200 ties -> even (192) -> 48
  for (int i = 4; i < 8; ++i) EXPECT_EQ(x[i], 0.0f);
}

TEST(Numerics, Fp4RoundTripPerBlock) {
  // amax 3 -> scale 2^ceil(log2(0.5)) = 0.5; values / 0.5 onto the e2m1 grid.
  std::vector<float> x = {3.0f, 0.3f, -1.3f, 2.2f};
  fp4_round_trip(x.data(), 4, 4);
  EXPECT_EQ(x[0], 3.0f);    // 6 -> 6
  EXPECT_EQ(x[1], 0.25f);   // 0.6 -> 0.5
  EXPECT_EQ(x[2], -1.5f);   // -2.6 -> -3
  EXPECT_EQ(x[3], 2.0f);    // 4.4 -> 4
}

TEST(Numerics, HadamardOfBasisVectorsAndInverse) {
  std::vector<float> x = {1, 0, 0, 0};
  hadamard(x.data(), 4, 0.5f);
  for (float v : x) EXPECT_EQ(v, 0.5f);
  std::vector<float> y = {1, 2, 3, 4};
  hadamard(y.data(), 4, 1.0f);  // rows of H4: (1,1,1,1), (1,-1,1,-1), (1,1,-1,-1), (1,-1,-1,1)
  EXPECT_EQ(y, (std::vector<float>{10, -2, -4, 0}));
  hadamard(y.data(), 4, 0.25f);  // H H = 4 I
  EXPECT_EQ(y, (std::vector<float>{1, 2, 3, 4}));
}

}  // namespace
}  // namespace deepinfer::model
