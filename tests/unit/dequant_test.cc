// Exact FP8 block and FP4 group dequantization (model/weights.h helpers).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "model/weights.h"

namespace deepinfer::model {
namespace {

// Independent e4m3fn decoder (pow-based, see dtype_test.cc).
double ref_e4m3(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::pow(2.0, -6) * (m / 8.0) : std::pow(2.0, e - 7) * (1.0 + m / 8.0);
  return s ? -mag : mag;
}

double ref_e2m1(int code) {
  static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  return (code & 8) ? -mag[code & 7] : mag[code & 7];
}

TEST(DequantFp8Blocks, RaggedEdgesUseTheRightBlockScale) {
  constexpr int kRows = 130, kCols = 260, kBlock = 128;
  // ceil(130/128) x ceil(260/128) = 2 x 3 block scales, the last row/column of blocks partial.
  constexpr int kSr = 2, kSc = 3;
  const float scale[kSr * kSc] = {1.0f, 0.25f, 8.0f,       // block row 0: cols 0..127, 128..255, 256..259
                                  0.03125f, 64.0f, 2.0f};  // block row 1: rows 128..129
  std::mt19937 rng(1234);
  std::vector<uint8_t> q(static_cast<size_t>(kRows) * kCols);
  for (auto& b : q) {
    b = static_cast<uint8_t>(rng() & 0xff);
    if ((b & 0x7f) == 0x7f) b ^= 1;  // keep NaN out of the bulk; checked separately below
  }
  std::vector<float> out(q.size(), -12345.0f);
  dequant_fp8_blocks(q.data(), scale, kRows, kCols, kBlock, out.data());
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const int br = r < 128 ? 0 : 1;
      const int bc = c < 128 ? 0 : c < 256 ? 1 : 2;
      const double want = ref_e4m3(q[r * kCols + c]) * scale[br * kSc + bc];
      ASSERT_EQ(static_cast<double>(out[r * kCols + c]), want) << "r=" << r << " c=" << c;
    }
}

TEST(DequantFp8Blocks, HandPickedCorners) {
  constexpr int kRows = 130, kCols = 260;
  std::vector<uint8_t> q(static_cast<size_t>(kRows) * kCols, 0x38);  // all 1.0
  const float scale[6] = {1, 2, 4, 8, 16, 32};
  q[0] = 0x7e;                     // 448 in block (0,0)
  q[127 * kCols + 128] = 0xb8;     // -1 in block (0,1)
  q[128 * kCols + 127] = 0x3c;     // 1.5 in block (1,0)
  q[129 * kCols + 259] = 0x40;     // 2 in block (1,2), the very last element
  q[1] = 0x7f;                     // NaN propagates
  std::vector<float> out(q.size());
  dequant_fp8_blocks(q.data(), scale, kRows, kCols, 128, out.data());
  EXPECT_EQ(out[0], 448.0f);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[127 * kCols + 128], -2.0f);
  EXPECT_EQ(out[127 * kCols + 256], 4.0f);
  EXPECT_EQ(out[128 * kCols + 127], 12.0f);
  EXPECT_EQ(out[128 * kCols + 128], 16.0f);
  EXPECT_EQ(out[129 * kCols + 258], 32.0f);
  EXPECT_EQ(out[129 * kCols + 259], 64.0f);
}

TEST(DequantFp4Groups, LowNibbleIsEvenColumn) {
  constexpr int kRows = 3, kCols = 96, kGroup = 32, kGroups = kCols / kGroup;
  std::mt19937 rng(99);
  std::vector<uint8_t> packed(static_cast<size_t>(kRows) * kCols / 2);
  for (auto& b : packed) b = static_cast<uint8_t>(rng() & 0xff);
  std::vector<float> scale(kRows * kGroups);
  for (int i = 0; i < kRows * kGroups; ++i) scale[i] = std::ldexp(1.0f, i - 4);  // 2^-4 .. 2^4
  std::vector<float> out(static_cast<size_t>(kRows) * kCols);
  dequant_fp4_groups(packed.data(), scale.data(), kRows, kCols, kGroup, out.data());
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) {
      const uint8_t byte = packed[r * (kCols / 2) + c / 2];
      const int code = (c % 2 == 0) ? (byte & 0x0f) : (byte >> 4);
      const double want = ref_e2m1(code) * scale[r * kGroups + c / kGroup];
      ASSERT_EQ(static_cast<double>(out[r * kCols + c]), want) << "r=" << r << " c=" << c;
    }
}

TEST(DequantFp4Groups, HandPickedBytes) {
  // One row of 64 inputs (32 bytes), two groups with scales 0.5 and 4.
  std::vector<uint8_t> packed(32, 0x00);
  packed[0] = 0x72;   // col 0 <- code 2 (1.0), col 1 <- code 7 (6.0)
  packed[15] = 0x9f;  // col 30 <- code 15 (-6), col 31 <- code 9 (-0.5)
  packed[16] = 0x1c;  // col 32 <- code 12 (-2), col 33 <- code 1 (0.5)
  const float scale[2] = {0.5f, 4.0f};
  std::vector<float> out(64, 99.0f);
  dequant_fp4_groups(packed.data(), scale, 1, 64, 32, out.data());
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[1], 3.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[30], -3.0f);
  EXPECT_EQ(out[31], -0.25f);
  EXPECT_EQ(out[32], -8.0f);
  EXPECT_EQ(out[33], 2.0f);
  EXPECT_EQ(out[63], 0.0f);
}

}  // namespace
}  // namespace deepinfer::model
