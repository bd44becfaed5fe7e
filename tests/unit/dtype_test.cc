// Element-type conversions (io/dtype.h) against hand-decoded bytes and independent decoders.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "io/dtype.h"

namespace deepinfer::io {
namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Independent e4m3fn decoder written from the OCP MX definition with pow() instead of ldexp/bit tricks:
// value = (-1)^s * 2^(e-7) * (1 + m/8) for e > 0, (-1)^s * 2^-6 * (m/8) for e == 0; S.1111.111 is NaN.
double ref_e4m3(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const double mag = e == 0 ? std::pow(2.0, -6) * (m / 8.0) : std::pow(2.0, e - 7) * (1.0 + m / 8.0);
  return s ? -mag : mag;
}

TEST(DTypeFp8E4M3, HandPickedBytes) {
  EXPECT_EQ(fp8_e4m3_to_f32(0x00), 0.0f);
  EXPECT_FALSE(std::signbit(fp8_e4m3_to_f32(0x00)));
  EXPECT_EQ(fp8_e4m3_to_f32(0x38), 1.0f);    // e=7, m=0
  EXPECT_EQ(fp8_e4m3_to_f32(0xb8), -1.0f);   // sign | e=7
  EXPECT_EQ(fp8_e4m3_to_f32(0x7e), 448.0f);  // e=15, m=6: 1.75 * 2^8, the largest finite value
  EXPECT_EQ(fp8_e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(0x01), 0.001953125f);  // smallest subnormal 2^-9
  EXPECT_EQ(fp8_e4m3_to_f32(0x07), 0.013671875f);  // largest subnormal 7 * 2^-9
  EXPECT_EQ(fp8_e4m3_to_f32(0x08), 0.015625f);     // smallest normal 2^-6
  EXPECT_EQ(fp8_e4m3_to_f32(0x3c), 1.5f);          // e=7, m=4
  EXPECT_EQ(fp8_e4m3_to_f32(0x40), 2.0f);          // e=8, m=0
  EXPECT_EQ(fp8_e4m3_to_f32(0x78), 256.0f);        // e=15, m=0 is a number in e4m3fn, not inf
  // Negative zero keeps its sign.
  const float nz = fp8_e4m3_to_f32(0x80);
  EXPECT_EQ(nz, 0.0f);
  EXPECT_TRUE(std::signbit(nz));
  // Only S.1111.111 is NaN; e4m3fn has no infinities.
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0xff)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(0x7f)));
}

TEST(DTypeFp8E4M3, AllBytesMatchIndependentDecoder) {
  int nans = 0;
  for (int b = 0; b < 256; ++b) {
    const double want = ref_e4m3(static_cast<uint8_t>(b));
    const float got = fp8_e4m3_to_f32(static_cast<uint8_t>(b));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "byte " << b;
      ++nans;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "byte " << b;
    EXPECT_EQ(std::signbit(got), (b & 0x80) != 0) << "byte " << b;
    EXPECT_FALSE(std::isinf(got)) << "byte " << b;
  }
  EXPECT_EQ(nans, 2);
}

TEST(DTypeE8M0, PowerOfTwoScales) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_EQ(e8m0_to_f32(126), 0.5f);
  EXPECT_EQ(e8m0_to_f32(120), 1.0f / 128.0f);
  EXPECT_EQ(e8m0_to_f32(254), float_of(0x7f000000u));  // 2^127, the largest
  EXPECT_EQ(static_cast<double>(e8m0_to_f32(0)), std::pow(2.0, -127));  // 2^-127 (an fp32 subnormal)
  EXPECT_GT(e8m0_to_f32(0), 0.0f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
  for (int b = 0; b < 255; ++b) EXPECT_EQ(static_cast<double>(e8m0_to_f32(static_cast<uint8_t>(b))), std::pow(2.0, b - 127)) << b;
}

TEST(DTypeFp4E2M1, AllSixteenCodes) {
  const float want[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int c = 0; c < 16; ++c) {
    const float got = fp4_e2m1_to_f32(static_cast<uint8_t>(c));
    EXPECT_EQ(got, want[c]) << "code " << c;
    EXPECT_EQ(std::signbit(got), c >= 8) << "code " << c;
  }
  // Documented: only the low 4 bits are the code.
  EXPECT_EQ(fp4_e2m1_to_f32(0xf7), 6.0f);
  EXPECT_EQ(fp4_e2m1_to_f32(0x3d), -3.0f);
}

TEST(DTypeBf16, RoundTripEveryNonNanValue) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    EXPECT_EQ(bits_of(f), h << 16);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h) << "bf16 0x" << std::hex << h;
  }
}

TEST(DTypeBf16, RoundToNearestEven) {
  // bf16 keeps 7 mantissa bits: near 1.0 the ulp is 2^-7.
  const float ulp = 1.0f / 128.0f;
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + ulp), 0x3f81);
  // Exactly half-way between 1.0 (even) and 1+ulp (odd) -> even, i.e. down.
  EXPECT_EQ(f32_to_bf16(1.0f + ulp / 2), 0x3f80);
  // Half-way between 1+ulp (odd) and 1+2ulp (even) -> even, i.e. up.
  EXPECT_EQ(f32_to_bf16(1.0f + 1.5f * ulp), 0x3f82);
  // Just above half-way rounds up; just below rounds down.
  EXPECT_EQ(f32_to_bf16(float_of(0x3f808001u)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(float_of(0x3f807fffu)), 0x3f80);
  // Same rules on the negative side (magnitude rounding).
  EXPECT_EQ(f32_to_bf16(-(1.0f + ulp / 2)), 0xbf80);
  EXPECT_EQ(f32_to_bf16(-(1.0f + 1.5f * ulp)), 0xbf82);
  // Tie carrying into the exponent: 0x3fffffff..  1.9999999 -> 2.0.
  EXPECT_EQ(f32_to_bf16(float_of(0x3fff8000u)), 0x4000);
  EXPECT_EQ(f32_to_bf16(float_of(0x3fff7fffu)), 0x3fff);
  // Largest finite float rounds to +inf (nearest in bf16 with unbounded exponent is 2^128).
  EXPECT_EQ(f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // Subnormals round with the same rule: 0x00008000 is a tie to even (0), 0x00018000 ties up to 2.
  EXPECT_EQ(f32_to_bf16(float_of(0x00008000u)), 0x0000);
  EXPECT_EQ(f32_to_bf16(float_of(0x00018000u)), 0x0002);
  // A value of 0.1f: 0x3dcccccd -> 0x3dcd (lower half 0xcccd > 0x8000 rounds up).
  EXPECT_EQ(f32_to_bf16(0.1f), 0x3dcd);
}

TEST(DTypeBf16, NanStaysNan) {
  for (uint32_t b : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7f80ffffu, 0x7f800100u}) {
    const uint16_t h = f32_to_bf16(float_of(b));
    EXPECT_TRUE(std::isnan(bf16_to_f32(h))) << std::hex << b << " -> " << h;
    EXPECT_EQ(h & 0x8000, (b >> 16) & 0x8000) << "sign kept";
  }
}

TEST(DTypeF16, HandPickedValues) {
  EXPECT_EQ(f16_to_f32(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x8000), 0.0f);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3800), 0.5f);
  EXPECT_EQ(f16_to_f32(0x3e00), 1.5f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);                 // largest finite
  EXPECT_EQ(f16_to_f32(0x0400), 6.103515625e-05f);         // smallest normal 2^-14
  EXPECT_EQ(f16_to_f32(0x0001), 5.9604644775390625e-08f);  // smallest subnormal 2^-24
  EXPECT_EQ(f16_to_f32(0x03ff), 1023.0f * 5.9604644775390625e-08f);  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);          // (1 + 341/1024) / 4
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
}

TEST(DTypeF16, AllFiniteValuesMatchFormula) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) continue;
    const double mag = e == 0 ? std::pow(2.0, -14) * (m / 1024.0) : std::pow(2.0, e - 15) * (1.0 + m / 1024.0);
    ASSERT_EQ(static_cast<double>(f16_to_f32(static_cast<uint16_t>(h))), s ? -mag : mag) << std::hex << h;
  }
}

TEST(DTypeNames, RoundTripAndSizes) {
  struct Case {
    const char* name;
    DType t;
    size_t size;
  } cases[] = {{"F32", DType::kF32, 4},     {"F16", DType::kF16, 2},         {"BF16", DType::kBF16, 2},
               {"F8_E4M3", DType::kF8E4M3, 1}, {"F8_E8M0", DType::kF8E8M0, 1}, {"I8", DType::kI8, 1},
               {"U8", DType::kU8, 1},       {"I32", DType::kI32, 4},         {"I64", DType::kI64, 8}};
  for (const auto& c : cases) {
    auto t = dtype_from_name(c.name);
    ASSERT_TRUE(t.has_value()) << c.name;
    EXPECT_EQ(*t, c.t);
    EXPECT_STREQ(dtype_name(c.t), c.name);
    EXPECT_EQ(dtype_size(c.t), c.size) << c.name;
  }
  EXPECT_FALSE(dtype_from_name("F7").has_value());
  EXPECT_FALSE(dtype_from_name("f32").has_value());  // names are case-sensitive
  EXPECT_FALSE(dtype_from_name("").has_value());
  EXPECT_FALSE(dtype_from_name("F32 ").has_value());
}

}  // namespace
}  // namespace deepinfer::io
