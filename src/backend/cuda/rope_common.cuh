// RoPE's per-pair arithmetic, shared by every CUDA kernel that rotates (ops.cu's rope, rope_to_bf16
// and norm_rope; v4_kernels.cu's inverse rotation with the group split). One definition means one
// set of roundings: two kernels that rotate the same fp32 value give the same bits, whatever the
// compiler would contract in each one's context. That matters where a shape or a size picks the
// kernel: rope_inverse_split_groups falls back to rope + split_groups for steps of more than 65535
// tokens (or unaligned shapes), and a token's bits must not depend on its step's size.
#pragma once

#include <cuda_runtime.h>

namespace deepinfer::backend::cuda::rope_common {

// (cos, sin) of pair i's angle inv_freq * p, scaled by the attention factor; the sine negated for
// the inverse rotation.
__device__ __forceinline__ float2 rope_cos_sin(float inv_freq, float p, float attention_factor, bool inverse) {
  float s, c;
  sincosf(inv_freq * p, &s, &c);
  s *= attention_factor;
  return make_float2(c * attention_factor, inverse ? -s : s);
}

// The rotation of the pair (a, b) with its contraction spelled out (one rounded product, then a
// fused multiply-add).
__device__ __forceinline__ float2 rope_rotate(float2 ab, float2 cs) {
  return make_float2(__fmaf_rn(ab.x, cs.x, -__fmul_rn(ab.y, cs.y)), __fmaf_rn(ab.y, cs.x, __fmul_rn(ab.x, cs.y)));
}

}  // namespace deepinfer::backend::cuda::rope_common
