// Release numerics on the GPU (model/numerics.h): the rounding steps of DeepSeek's official
// inference code, as kernels. Each follows the CPU function named in its comment with the same
// fp32 operations, so a value is rounded identically on both backends given identical inputs.
// Device pointers; asynchronous on `stream`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::backend::cuda {

using bf16 = __nv_bfloat16;

// y[m, :] = x[m, :] rounded through FP8 e4m3 in blocks of 128 along the row with power-of-two
// scales (model::fp8_round_trip(row, K, 128)); the results are bf16 numbers. In place allowed.
void fp8_round_trip_rows(const bf16* x, int M, int K, bf16* y, cudaStream_t stream);

// The official per-head q norm as a chain of bf16 tensor ops, in place on rows of `dim` fp32
// values (DeepSeekV4::attention, release branch): ss = sum bf(v^2); ms = bf(bf(ss / dim) + eps);
// inv = bf(1 / sqrt(ms)); v = bf(v * inv).
void q_head_norm_release(float* x, int rows, int dim, float eps, cudaStream_t stream);

// In place: each row of n (a power of two <= 1024) fp32 values gets the Walsh-Hadamard transform
// times `scale` (model::hadamard), then is rounded to bf16.
void hadamard_rows_bf16(float* x, int rows, int n, float scale, cudaStream_t stream);

// The official indexer's bf16 score chain (DeepSeekV4::attention, release branch), for token t and
// key w < num_keys[t]: sum over heads in ascending order of bf(max(bf(q . k), 0) * weights[t, h]),
// fp32 accumulation, then bf(sum). q: [T, heads, dim] bf16; keys as in indexer_scores (attention.h).
void indexer_scores_release(const bf16* q, const float* weights, int T, int heads, int dim, const bf16* const* keys,
                            const int* key_begin, const int* num_keys, int max_keys, float* score, int score_stride,
                            cudaStream_t stream);

}  // namespace deepinfer::backend::cuda
