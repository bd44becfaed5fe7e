#include "model/kv_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "io/dtype.h"
#include "model/numerics.h"

namespace deepinfer::model {

namespace {

constexpr int kFp8Block = 64;  // KV non-RoPE dims per scale
constexpr int kFp4Block = 32;  // indexer dims per scale
constexpr float kFp4AmaxFloor = 6.0f * 0x1p-126f;
constexpr float kFp8AmaxFloor = 1e-4f;

int blocks(int n, int block) { return (n + block - 1) / block; }

// The e4m3fn code of a value already on the e4m3 grid (|v| <= 448).
uint8_t e4m3_code(float v) {
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const float a = std::fabs(v);
  if (a == 0.0f) return sign;
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(a * 512.0f);  // subnormal: a = m * 2^-9
  int e;
  const float f = std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const int mant = static_cast<int>((f * 2.0f - 1.0f) * 8.0f);
  return sign | static_cast<uint8_t>(((e - 1 + 7) << 3) | mant);
}

// The e2m1 code of a value already on the e2m1 grid (|v| <= 6).
uint8_t e2m1_code(float v) {
  static constexpr float kGrid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float a = std::fabs(v);
  const uint8_t c = static_cast<uint8_t>(std::find(kGrid, kGrid + 8, a) - kGrid);
  DI_CHECK(c < 8, "%g is not an e2m1 value", static_cast<double>(a));
  return static_cast<uint8_t>((std::signbit(v) ? 8 : 0) | c);
}

// Power-of-two block scale as its ue8m0 byte.
uint8_t scale_byte(float s) { return static_cast<uint8_t>(std::ilogb(s) + 127); }

float block_scale(const float* x, int n, float floor, float inv_qmax) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  return pow2_ceil_scale(std::fmax(amax, floor), inv_qmax);
}

}  // namespace

const char* kv_cache_dtype_name(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::kF32: return "float32";
    case KvCacheDtype::kBF16: return "bfloat16";
    case KvCacheDtype::kFP8: return "fp8";
  }
  return "?";
}

std::optional<KvCacheDtype> kv_cache_dtype_from_name(std::string_view name) {
  if (name == "float32" || name == "fp32") return KvCacheDtype::kF32;
  if (name == "bfloat16" || name == "bf16") return KvCacheDtype::kBF16;
  if (name == "fp8" || name == "fp8_e4m3") return KvCacheDtype::kFP8;
  return std::nullopt;
}

KvCacheDtype resolve_kv_cache_dtype(std::string_view name, bool release) {
  if (name == "auto") return release ? KvCacheDtype::kBF16 : KvCacheDtype::kF32;
  const std::optional<KvCacheDtype> d = kv_cache_dtype_from_name(name);
  DI_CHECK(d.has_value(), "kv cache dtype '%.*s' not validated", static_cast<int>(name.size()), name.data());
  return *d;
}

// ---- KV rows ----

size_t KvRowFormat::bytes() const {
  switch (dtype) {
    case KvCacheDtype::kF32: return static_cast<size_t>(dims) * 4;
    case KvCacheDtype::kBF16: return static_cast<size_t>(dims) * 2;
    case KvCacheDtype::kFP8: {
      const int nope = dims - rope_dims;
      const size_t head = static_cast<size_t>(nope) + blocks(nope, kFp8Block);
      return (head + 1) / 2 * 2 + static_cast<size_t>(rope_dims) * 2;  // bf16 tail at an even offset
    }
  }
  return 0;
}

void KvRowFormat::encode(const float* row, uint8_t* dst) const {
  switch (dtype) {
    case KvCacheDtype::kF32:
      std::memcpy(dst, row, static_cast<size_t>(dims) * 4);
      return;
    case KvCacheDtype::kBF16:
      for (int i = 0; i < dims; ++i) {
        const uint16_t h = io::f32_to_bf16(row[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case KvCacheDtype::kFP8: {
      const int nope = dims - rope_dims, nb = blocks(nope, kFp8Block);
      uint8_t* scales = dst + nope;
      for (int b = 0; b < nb; ++b) {
        const int lo = b * kFp8Block, n = std::min(kFp8Block, nope - lo);
        const float s = block_scale(row + lo, n, kFp8AmaxFloor, 1.0f / 448.0f);
        scales[b] = scale_byte(s);
        for (int i = lo; i < lo + n; ++i) dst[i] = e4m3_code(round_e4m3(row[i] / s));
      }
      uint8_t* tail = dst + (static_cast<size_t>(nope) + nb + 1) / 2 * 2;
      if ((nope + nb) % 2) dst[nope + nb] = 0;  // the pad byte
      for (int i = 0; i < rope_dims; ++i) {
        const uint16_t h = io::f32_to_bf16(row[nope + i]);
        std::memcpy(tail + 2 * i, &h, 2);
      }
      return;
    }
  }
}

void KvRowFormat::decode(const uint8_t* src, float* row) const {
  switch (dtype) {
    case KvCacheDtype::kF32:
      std::memcpy(row, src, static_cast<size_t>(dims) * 4);
      return;
    case KvCacheDtype::kBF16:
      for (int i = 0; i < dims; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        row[i] = io::bf16_to_f32(h);
      }
      return;
    case KvCacheDtype::kFP8: {
      const int nope = dims - rope_dims, nb = blocks(nope, kFp8Block);
      const uint8_t* scales = src + nope;
      for (int i = 0; i < nope; ++i) row[i] = io::fp8_e4m3_to_f32(src[i]) * io::e8m0_to_f32(scales[i / kFp8Block]);
      const uint8_t* tail = src + (static_cast<size_t>(nope) + nb + 1) / 2 * 2;
      for (int i = 0; i < rope_dims; ++i) {
        uint16_t h;
        std::memcpy(&h, tail + 2 * i, 2);
        row[nope + i] = io::bf16_to_f32(h);
      }
      return;
    }
  }
}

void KvRowFormat::round_trip(float* row) const {
  switch (dtype) {
    case KvCacheDtype::kF32:
      return;
    case KvCacheDtype::kBF16:
      round_bf16(row, static_cast<size_t>(dims));
      return;
    case KvCacheDtype::kFP8:
      fp8_round_trip(row, dims - rope_dims, kFp8Block);
      round_bf16(row + dims - rope_dims, static_cast<size_t>(rope_dims));
      return;
  }
}

// ---- indexer keys ----

size_t IndexRowFormat::bytes() const {
  switch (dtype) {
    case KvCacheDtype::kF32: return static_cast<size_t>(dims) * 4;
    case KvCacheDtype::kBF16: return static_cast<size_t>(dims) * 2;
    case KvCacheDtype::kFP8: return static_cast<size_t>(dims + 1) / 2 + blocks(dims, kFp4Block);
  }
  return 0;
}

void IndexRowFormat::encode(const float* row, uint8_t* dst) const {
  if (dtype != KvCacheDtype::kFP8) {
    KvRowFormat{dtype, dims, 0}.encode(row, dst);
    return;
  }
  const int nb = blocks(dims, kFp4Block), packed = (dims + 1) / 2;
  std::memset(dst, 0, static_cast<size_t>(packed));
  for (int b = 0; b < nb; ++b) {
    const int lo = b * kFp4Block, n = std::min(kFp4Block, dims - lo);
    const float s = block_scale(row + lo, n, kFp4AmaxFloor, 1.0f / 6.0f);
    dst[packed + b] = scale_byte(s);
    for (int i = lo; i < lo + n; ++i) {
      const uint8_t code = e2m1_code(round_e2m1(row[i] / s));
      dst[i / 2] |= static_cast<uint8_t>(i % 2 ? code << 4 : code);
    }
  }
}

void IndexRowFormat::decode(const uint8_t* src, float* row) const {
  if (dtype != KvCacheDtype::kFP8) {
    KvRowFormat{dtype, dims, 0}.decode(src, row);
    return;
  }
  const int packed = (dims + 1) / 2;
  for (int i = 0; i < dims; ++i) {
    const uint8_t code = i % 2 ? src[i / 2] >> 4 : src[i / 2] & 0x0f;
    row[i] = io::fp4_e2m1_to_f32(code) * io::e8m0_to_f32(src[packed + i / kFp4Block]);
  }
}

void IndexRowFormat::round_trip(float* row) const {
  if (dtype == KvCacheDtype::kFP8)
    fp4_round_trip(row, dims, kFp4Block);
  else
    KvRowFormat{dtype, dims, 0}.round_trip(row);
}

}  // namespace deepinfer::model
