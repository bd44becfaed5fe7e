// FP8 rounding steps of release numerics as device functions, shared by the kernels that quantize
// (release_kernels.cu, kv_fp8.cu, fp8_gemm.cu). Each is the CPU function named in its comment with
// the same fp32 operations, so values round identically on both backends.
#pragma once

#include <cuda_runtime.h>

namespace deepinfer::backend::cuda {

// model::round_e4m3: nearest e4m3fn value, ties to even, saturating at +-448, subnormal step 2^-9.
__device__ __forceinline__ float round_e4m3(float x) {
  if (isnan(x)) return x;
  const float a = fabsf(x);
  if (a >= 448.0f) return copysignf(448.0f, x);
  if (a == 0.0f) return x;
  int e;
  frexpf(a, &e);
  int E = e - 1;
  if (E < -6) E = -6;
  float r = ldexpf(rintf(ldexpf(a, -(E - 3))), E - 3);
  if (r > 448.0f) r = 448.0f;
  return copysignf(r, x);
}

// model::pow2_ceil_scale with the product in fp32: the power of two at or above a * inv_qmax.
__device__ __forceinline__ float pow2_ceil_scale_f32(float a, float inv_qmax) {
  const unsigned bits = __float_as_uint(__fmul_rn(a, inv_qmax));
  const int exp = static_cast<int>((bits >> 23) & 0xff);
  const int up = (bits & 0x7fffff) != 0 ? 1 : 0;
  return ldexpf(1.0f, exp - 127 + up);
}

}  // namespace deepinfer::backend::cuda
