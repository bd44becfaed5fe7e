// Release-numerics rounding kernels (release_kernels.h). Plain, one-thread-per-value or
// one-warp-per-row code: these steps are memory-bound and small next to the GEMMs.

#include <cuda_bf16.h>

#include "backend/cuda/release_kernels.h"
#include "backend/cuda/fp8_round.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda {
namespace {

__device__ inline float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// One warp per 128-value block.
__global__ void fp8_round_trip_kernel(const bf16* x, int M, int K, bf16* y) {
  pdl_prologue();
  const int blocks_per_row = (K + 127) / 128;
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (warp >= M * blocks_per_row) return;
  const int m = warp / blocks_per_row, b = (warp % blocks_per_row) * 128;
  const int e = min(b + 128, K);
  const bf16* xr = x + static_cast<size_t>(m) * K;
  bf16* yr = y + static_cast<size_t>(m) * K;
  float amax = 0.0f;
  for (int i = b + lane; i < e; i += 32) amax = fmaxf(amax, fabsf(__bfloat162float(xr[i])));
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = pow2_ceil_scale_f32(fmaxf(amax, 1e-4f), 1.0f / 448.0f);
  for (int i = b + lane; i < e; i += 32) {
    const float v = __bfloat162float(xr[i]);
    yr[i] = __float2bfloat16_rn(__fmul_rn(round_e4m3(__fdiv_rn(v, s)), s));
  }
}

// One warp per row; the sum of squares is sequential per lane then a fixed butterfly.
__global__ void q_head_norm_kernel(float* x, int rows, int dim, float eps) {
  pdl_prologue();
  const int warp = static_cast<int>((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
  if (warp >= rows) return;
  float* v = x + static_cast<size_t>(warp) * dim;
  float ss = 0.0f;
  for (int i = lane; i < dim; i += 32) ss = __fadd_rn(ss, bf(__fmul_rn(v[i], v[i])));
  for (int o = 16; o > 0; o /= 2) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
  const float ms = bf(__fadd_rn(bf(__fdiv_rn(ss, static_cast<float>(dim))), eps));
  const float inv = bf(__fdiv_rn(1.0f, sqrtf(ms)));
  for (int i = lane; i < dim; i += 32) v[i] = bf(__fmul_rn(v[i], inv));
}

// One block per row, the row in shared memory; butterflies in the CPU's order (h = 1, 2, 4, ...).
__global__ void hadamard_kernel(float* x, int n, float scale) {
  pdl_prologue();
  extern __shared__ float row[];
  float* v = x + static_cast<size_t>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += blockDim.x) row[i] = v[i];
  __syncthreads();
  for (int h = 1; h < n; h *= 2) {
    for (int p = threadIdx.x; p < n / 2; p += blockDim.x) {
      const int i = (p / h) * 2 * h + (p % h);
      const float a = row[i], b = row[i + h];
      row[i] = __fadd_rn(a, b);
      row[i + h] = __fsub_rn(a, b);
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) v[i] = bf(__fmul_rn(row[i], scale));
}

// One thread per (token, key); the token's q is read through L1/L2 (small).
__global__ void indexer_release_kernel(const bf16* q, const float* weights, int heads, int dim,
                                       const bf16* const* keys, const int* key_begin, const int* num_keys,
                                       float* score, int score_stride) {
  pdl_prologue();
  const int t = static_cast<int>(blockIdx.y);
  const int w = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (w >= num_keys[t]) return;
  const bf16* k = keys[key_begin[t] + w];
  float sum = 0.0f;
  for (int h = 0; h < heads; ++h) {
    const bf16* qv = q + (static_cast<size_t>(t) * heads + h) * dim;
    float d = 0.0f;
    for (int i = 0; i < dim; ++i) d = __fadd_rn(d, __fmul_rn(__bfloat162float(qv[i]), __bfloat162float(k[i])));
    sum = __fadd_rn(sum, bf(__fmul_rn(fmaxf(bf(d), 0.0f), weights[static_cast<size_t>(t) * heads + h])));
  }
  score[static_cast<size_t>(t) * score_stride + w] = bf(sum);
}

}  // namespace

void fp8_round_trip_rows(const bf16* x, int M, int K, bf16* y, cudaStream_t stream) {
  const long long warps = static_cast<long long>(M) * ((K + 127) / 128);
  if (warps == 0) return;
  fp8_round_trip_kernel<<<static_cast<unsigned>((warps * 32 + 255) / 256), 256, 0, stream>>>(x, M, K, y);
}

void q_head_norm_release(float* x, int rows, int dim, float eps, cudaStream_t stream) {
  if (rows == 0) return;
  q_head_norm_kernel<<<static_cast<unsigned>((static_cast<long long>(rows) * 32 + 255) / 256), 256, 0, stream>>>(x, rows, dim,
                                                                                                              eps);
}

void hadamard_rows_bf16(float* x, int rows, int n, float scale, cudaStream_t stream) {
  if (rows == 0) return;
  hadamard_kernel<<<static_cast<unsigned>(rows), 128, static_cast<size_t>(n) * sizeof(float), stream>>>(x, n, scale);
}

void indexer_scores_release(const bf16* q, const float* weights, int T, int heads, int dim, const bf16* const* keys,
                            const int* key_begin, const int* num_keys, int max_keys, float* score, int score_stride,
                            cudaStream_t stream) {
  if (T == 0 || max_keys == 0) return;
  indexer_release_kernel<<<dim3(static_cast<unsigned>((max_keys + 127) / 128), static_cast<unsigned>(T)), 128, 0, stream>>>(
      q, weights, heads, dim, keys, key_begin, num_keys, score, score_stride);
}

}  // namespace deepinfer::backend::cuda
