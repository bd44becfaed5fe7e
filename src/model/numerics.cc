#include "model/numerics.h"

#include <cmath>
#include <cstring>

#include "base/check.h"
#include "io/dtype.h"
#include "model/config.h"

namespace deepinfer::model {

const char* numerics_name(Numerics n) { return n == Numerics::kExact ? "exact" : "release"; }

std::optional<Numerics> numerics_from_name(std::string_view name) {
  if (name == "exact") return Numerics::kExact;
  if (name == "release") return Numerics::kRelease;
  return std::nullopt;
}

Numerics resolve_numerics(std::string_view name, const ModelConfig& config) {
  if (name == "auto") return config.fp8_quantized ? Numerics::kRelease : Numerics::kExact;
  const std::optional<Numerics> n = numerics_from_name(name);
  DI_CHECK(n.has_value(), "numerics name '%.*s' not validated", static_cast<int>(name.size()), name.data());
  return *n;
}

float round_bf16(float x) { return io::bf16_to_f32(io::f32_to_bf16(x)); }

void round_bf16(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
}

namespace {

// Rounds |v| to a multiple of 2^q_exp, ties to even (the division by a power of two is exact).
float round_to_quantum(float v, int q_exp) {
  return std::ldexp(std::nearbyint(std::ldexp(v, -q_exp)), q_exp);
}

}  // namespace

float round_e4m3(float x) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  if (a >= 448.0f) return std::copysign(448.0f, x);
  if (a == 0.0f) return x;
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
  int E = e - 1;
  if (E < -6) E = -6;  // subnormals share the smallest normal's quantum 2^-9
  float r = round_to_quantum(a, E - 3);
  if (r > 448.0f) r = 448.0f;
  return std::copysign(r, x);
}

float round_e2m1(float x) {
  if (std::isnan(x)) return x;
  const float a = std::fabs(x);
  if (a >= 6.0f) return std::copysign(6.0f, x);
  // Quanta: 0.5 below 2 (subnormal 0.5 and 1.0-1.5), 1 in [2, 4), 2 in [4, 6].
  const int q_exp = a < 2.0f ? -1 : (a < 4.0f ? 0 : 1);
  float r = round_to_quantum(a, q_exp);
  if (r > 6.0f) r = 6.0f;
  return std::copysign(r, x);
}

float pow2_ceil_scale(float a, float inv_qmax) {
  const float t = a * inv_qmax;
  uint32_t bits;
  std::memcpy(&bits, &t, 4);
  const int exp = static_cast<int>((bits >> 23) & 0xff);
  const int up = (bits & 0x7fffff) != 0 ? 1 : 0;
  DI_CHECK(exp > 0 && exp < 255, "scale out of range for amax %g", static_cast<double>(a));
  return std::ldexp(1.0f, exp - 127 + up);
}

void fp8_round_trip(float* x, int n, int block) {
  for (int b = 0; b < n; b += block) {
    const int e = b + block < n ? b + block : n;
    float amax = 0.0f;
    for (int i = b; i < e; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float s = pow2_ceil_scale(std::fmax(amax, 1e-4f), 1.0f / 448.0f);
    for (int i = b; i < e; ++i) x[i] = round_e4m3(x[i] / s) * s;
  }
}

void fp4_round_trip(float* x, int n, int block) {
  const float floor = 6.0f * std::ldexp(1.0f, -126);
  for (int b = 0; b < n; b += block) {
    const int e = b + block < n ? b + block : n;
    float amax = 0.0f;
    for (int i = b; i < e; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float s = pow2_ceil_scale(std::fmax(amax, floor), 1.0f / 6.0f);
    for (int i = b; i < e; ++i) x[i] = round_e2m1(x[i] / s) * s;
  }
}

void hadamard(float* x, int n, float scale) {
  DI_CHECK(n > 0 && (n & (n - 1)) == 0, "Hadamard size %d is not a power of two", n);
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

}  // namespace deepinfer::model
