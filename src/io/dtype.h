// Element types found in checkpoints, and exact conversions of each to fp32.
// FP8 e4m3fn, UE8M0 (pure power-of-two exponent bytes) and FP4 e2m1 follow the OCP MX spec, as
// used by the DeepSeek-V4 release.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer::io {

enum class DType { kF32, kF16, kBF16, kF8E4M3, kF8E8M0, kI8, kU8, kI32, kI64 };

// Safetensors spelling ("F32", "F8_E4M3", ...) <-> DType. nullopt for unknown names.
std::optional<DType> dtype_from_name(std::string_view name);
const char* dtype_name(DType t);
size_t dtype_size(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even fp32 -> bf16 (NaN stays NaN).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
// e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; no infinities; 0x7f/0xff are NaN; max 448.
float fp8_e4m3_to_f32(uint8_t b);
// UE8M0 scale byte: 2^(b-127); 0xff is NaN.
float e8m0_to_f32(uint8_t b);
// e2m1 code (low 4 bits): {0,.5,1,1.5,2,3,4,6} with sign in bit 3.
float fp4_e2m1_to_f32(uint8_t code);

}  // namespace deepinfer::io
