#include "io/dtype.h"

#include <cmath>
#include <limits>

namespace deepinfer::io {

namespace {
struct NameEntry {
  const char* name;
  DType type;
  size_t size;
};
constexpr NameEntry kNames[] = {
    {"F32", DType::kF32, 4},       {"F16", DType::kF16, 2},         {"BF16", DType::kBF16, 2},
    {"F8_E4M3", DType::kF8E4M3, 1}, {"F8_E8M0", DType::kF8E8M0, 1}, {"I8", DType::kI8, 1},
    {"U8", DType::kU8, 1},         {"I32", DType::kI32, 4},         {"I64", DType::kI64, 8},
};
}  // namespace

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& e : kNames)
    if (name == e.name) return e.type;
  return std::nullopt;
}

const char* dtype_name(DType t) {
  for (const auto& e : kNames)
    if (e.type == t) return e.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const auto& e : kNames)
    if (e.type == t) return e.size;
  return 0;
}

float f16_to_f32(uint16_t h) {
  const int sign = (h >> 15) & 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

float fp8_e4m3_to_f32(uint8_t b) {
  const int sign = (b >> 7) & 1;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  float v;
  if (exp == 0xf && mant == 0x7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -9);  // subnormal: mant/8 * 2^-6
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x8), exp - 10);  // (1+mant/8) * 2^(exp-7)
  }
  return sign ? -v : v;
}

float e8m0_to_f32(uint8_t b) {
  if (b == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(b) - 127);
}

float fp4_e2m1_to_f32(uint8_t code) {
  static constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kMagnitude[code & 0x7];
  return (code & 0x8) ? -v : v;
}

}  // namespace deepinfer::io
