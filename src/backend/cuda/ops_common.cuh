// Device helpers shared by the token-wise ops (ops.cu) and greedy sampling (sampling.cu): the
// chunk loads and stores, bf16 rounding and the fixed-order warp and block reductions whose order
// makes a row's bits independent of the batch (the conventions at the top of ops.cu).
// Internal to the CUDA backend.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace deepinfer::backend::cuda::ops_common {

using bf16 = __nv_bfloat16;

constexpr unsigned kFullMask = 0xffffffffu;

inline bool aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}
__host__ __device__ constexpr int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

// grid.y for per-row kernels: enough tiles of `threads` chunks to cover `chunks`.
inline dim3 row_grid(int rows, int chunks, int threads) {
  return dim3(static_cast<unsigned>(rows), static_cast<unsigned>(std::max(1, ceil_div(chunks, threads))));
}

__device__ __forceinline__ float sigmoidf(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// Chunk c (values 4c .. 4c+3) of a row of n floats; zeros past the end on the scalar path.
__device__ __forceinline__ float4 load4(const float* row, int c, int n, bool vec) {
  const int i = 4 * c;
  if (vec) return *reinterpret_cast<const float4*>(row + i);
  float4 v;
  v.x = i < n ? row[i] : 0.0f;
  v.y = i + 1 < n ? row[i + 1] : 0.0f;
  v.z = i + 2 < n ? row[i + 2] : 0.0f;
  v.w = i + 3 < n ? row[i + 3] : 0.0f;
  return v;
}

__device__ __forceinline__ void store4(float* row, int c, int n, bool vec, float4 v) {
  const int i = 4 * c;
  if (vec) {
    *reinterpret_cast<float4*>(row + i) = v;
    return;
  }
  if (i < n) row[i] = v.x;
  if (i + 1 < n) row[i + 1] = v.y;
  if (i + 2 < n) row[i + 2] = v.z;
  if (i + 3 < n) row[i + 3] = v.w;
}

// fp32(bf16(v)), nearest even: the release numerics' rounding of an fp32 tensor.
__device__ __forceinline__ float round_bf16_dev(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float4 round_bf16x4(float4 v) {
  return make_float4(round_bf16_dev(v.x), round_bf16_dev(v.y), round_bf16_dev(v.z), round_bf16_dev(v.w));
}

// Four values rounded to bf16 (nearest even), packed in memory order (x lowest).
__device__ __forceinline__ uint2 pack_bf16x4(float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 packed;
  memcpy(&packed.x, &lo, 4);
  memcpy(&packed.y, &hi, 4);
  return packed;
}

// One 8-byte store on the vector path.
__device__ __forceinline__ void store4_bf16(bf16* row, int c, int n, bool vec, float4 v) {
  const int i = 4 * c;
  if (vec) {
    *reinterpret_cast<uint2*>(row + i) = pack_bf16x4(v);
    return;
  }
  if (i < n) row[i] = __float2bfloat16_rn(v.x);
  if (i + 1 < n) row[i + 1] = __float2bfloat16_rn(v.y);
  if (i + 2 < n) row[i + 2] = __float2bfloat16_rn(v.z);
  if (i + 3 < n) row[i + 3] = __float2bfloat16_rn(v.w);
}

__device__ __forceinline__ float4 fma4(float a, float4 x, float4 acc) {
  return make_float4(fmaf(a, x.x, acc.x), fmaf(a, x.y, acc.y), fmaf(a, x.z, acc.z), fmaf(a, x.w, acc.w));
}
// acc + a . b, accumulated in the order x, y, z, w.
__device__ __forceinline__ float dot4(float4 a, float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
  return v;
}

// One level of warp_sum_halving: values [0, kHalf) and [kHalf, 2 kHalf) pair up with lane l ^ kOff.
template <int kHalf, int kOff, int kN>
__device__ __forceinline__ void warp_sum_halving_level(float (&v)[kN], int lane) {
  const bool upper = (lane & kOff) != 0;
#pragma unroll
  for (int i = 0; i < kHalf; ++i) {
    const float lo = v[i], hi = v[kHalf + i];
    const float send = upper ? lo : hi;
    const float keep = upper ? hi : lo;
    v[i] = keep + __shfl_xor_sync(kFullMask, send, kOff);
  }
}
// Sums each of kN values over the 32 lanes of a warp with exactly the additions of an xor
// butterfly (lane l adds its partner l ^ off at off = 16, 8, ..., 1; a + b == b + a bitwise), but
// at each level a lane keeps only half of its values and receives the partner's matching half:
// kN - kN / 32 shuffles instead of 5 kN. On return lane l holds the totals of values
// l * (kN / 32) + i in v[i], i < kN / 32. The levels are compile-time calls (a runtime loop over
// levels made the compiler index the array in local memory).
template <int kN>
__device__ __forceinline__ void warp_sum_halving(float (&v)[kN]) {
  static_assert(kN % 32 == 0);
  const int lane = static_cast<int>(threadIdx.x) % 32;
  warp_sum_halving_level<kN / 2, 16>(v, lane);
  warp_sum_halving_level<kN / 4, 8>(v, lane);
  warp_sum_halving_level<kN / 8, 4>(v, lane);
  warp_sum_halving_level<kN / 16, 2>(v, lane);
  warp_sum_halving_level<kN / 32, 1>(v, lane);
}

// Sum of v over a block of kThreads threads, the same value in every thread: butterfly per warp,
// then every thread adds the warp totals in warp order. `scratch` holds kThreads / 32 floats.
// kBarrier: 0 for __syncthreads, else the id of a named barrier the threads 0 .. kThreads - 1 of a
// larger block meet at (the same sum either way).
template <int kThreads, int kBarrier = 0>
__device__ float block_sum(float v, float* scratch) {
  static_assert(kThreads % 32 == 0);
  v = warp_sum(v);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  if (lane == 0) scratch[warp] = v;
  if constexpr (kBarrier == 0)
    __syncthreads();
  else  // a named barrier over threads 0 .. kThreads - 1 only (the CTA may hold more)
    asm volatile("bar.sync %0, %1;\n" ::"n"(kBarrier), "n"(kThreads) : "memory");
  float total = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

}  // namespace deepinfer::backend::cuda::ops_common
