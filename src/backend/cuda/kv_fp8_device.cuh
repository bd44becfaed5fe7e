// Device helpers shared by attention.cu and kv_fp8.cu: decoding FP8 KV rows and FP4 indexer keys
// (model/kv_format.h) into bf16. Every decoded value is code * 2^(scale - 127) computed as one fp32
// multiply, exactly as model::KvRowFormat/IndexRowFormat::decode does; the products carry at most
// 4 significant bits, so the rounding to bf16 that follows is exact (bf16 has fp32's exponent range).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace deepinfer::backend::cuda::kvfp8 {

// io::e8m0_to_f32: 2^(b - 127); 0xff is NaN. b == 0 is the fp32 subnormal 2^-127.
__device__ __forceinline__ float e8m0_to_float(uint32_t b) {
  if (b == 0xffu) return __uint_as_float(0x7fc00000u);
  return b == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(b << 23);
}

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return (static_cast<uint32_t>(__bfloat16_as_ushort(v.y)) << 16) | __bfloat16_as_ushort(v.x);
}

// Two e4m3fn codes (low byte = first value) times `scale`, as packed bf16x2. The e4m3 -> f16 step is
// exact (every e4m3fn value is an f16 value; 0x7f/0xff give NaN like io::fp8_e4m3_to_f32).
__device__ __forceinline__ uint32_t e4m3x2_scaled_bf16x2(uint32_t two_codes, float scale) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes & 0xffffu), __NV_E4M3);
  const float lo = __half2float(__ushort_as_half(h.x));
  const float hi = __half2float(__ushort_as_half(h.y));
  return bf16x2_bits(__fmul_rn(lo, scale), __fmul_rn(hi, scale));
}

// Eight e4m3 codes (bytes of `codes` in order) times `scale` -> eight bf16 (16 bytes).
__device__ __forceinline__ uint4 e4m3x8_scaled_bf16(uint2 codes, float scale) {
  return make_uint4(e4m3x2_scaled_bf16x2(codes.x, scale), e4m3x2_scaled_bf16x2(codes.x >> 16, scale),
                    e4m3x2_scaled_bf16x2(codes.y, scale), e4m3x2_scaled_bf16x2(codes.y >> 16, scale));
}

// io::fp4_e2m1_to_f32 of the low 4 bits of `code`.
__device__ __forceinline__ float e2m1_to_float(uint32_t code) {
  // Magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} = {0, 1, 2, 3, 4, 6, 8, 12} / 2 (exact small integers).
  const uint32_t m = code & 7u;
  const float twice = m < 5u ? static_cast<float>(m) : (m == 5u ? 6.0f : (m == 6u ? 8.0f : 12.0f));
  const float v = twice * 0.5f;
  return (code & 8u) ? -v : v;
}

// Eight e2m1 codes (the 4 bytes of `word`, low nibble first) times `scale` -> eight bf16.
__device__ __forceinline__ uint4 e2m1x8_scaled_bf16(uint32_t word, float scale) {
  uint32_t out[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t byte = word >> (8 * i);
    out[i] = bf16x2_bits(__fmul_rn(e2m1_to_float(byte), scale), __fmul_rn(e2m1_to_float(byte >> 4), scale));
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

// 16 bytes from global memory at p, read in kAlign-byte pieces (p is kAlign-aligned; kAlign is
// 1, 2, 4, 8 or 16). Little-endian byte order into the uint4's words.
template <int kAlign>
__device__ __forceinline__ uint4 load16(const uint8_t* p) {
  if constexpr (kAlign == 16) {
    return *reinterpret_cast<const uint4*>(p);
  } else if constexpr (kAlign == 8) {
    const uint2 a = reinterpret_cast<const uint2*>(p)[0], b = reinterpret_cast<const uint2*>(p)[1];
    return make_uint4(a.x, a.y, b.x, b.y);
  } else if constexpr (kAlign == 4) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(p);
    return make_uint4(w[0], w[1], w[2], w[3]);
  } else if constexpr (kAlign == 2) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = static_cast<uint32_t>(h[2 * i]) | (static_cast<uint32_t>(h[2 * i + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    static_assert(kAlign == 1);
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      w[i] = static_cast<uint32_t>(p[4 * i]) | (static_cast<uint32_t>(p[4 * i + 1]) << 8) |
             (static_cast<uint32_t>(p[4 * i + 2]) << 16) | (static_cast<uint32_t>(p[4 * i + 3]) << 24);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// The largest power of two <= 16 that divides `bytes`: the alignment of every row of a page of
// rows of `bytes` bytes packed from a 16-byte-aligned base.
__host__ __device__ constexpr int packed_row_alignment(long long bytes) {
  int a = 16;
  while (a > 1 && bytes % a != 0) a /= 2;
  return a;
}

}  // namespace deepinfer::backend::cuda::kvfp8
