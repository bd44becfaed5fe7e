// Batch-invariant bf16 GEMMs for the CUDA backend (sm_90; the large-M tiles need sm_90a features).
//
// Contract shared by every entry point:
//  * y[m, n] = sum_k x[m, k] * W[n, k]: x bf16 [M, K] row-major, W bf16 [N, K] row-major (a linear
//    layer's weight as stored: out features x in features), fp32 accumulation; a bf16 output is the
//    fp32 sum rounded to nearest even.
//  * Batch invariance: y[m, n] is computed with a sequence of operations that depends only on
//    (K, N) and on x[m, :], W[n, :] -- never on M, on m, or on the other rows. In particular no split
//    of K whose size depends on M, and every tile shape used for any M accumulates each element
//    over K in the same order with the same instruction shape. So a token's projection is bitwise
//    identical alone, in a batch of 1000, or as a row of grouped_gemm.
//  * K % 8 == 0 and x, W, y 16-byte aligned (rows are 16-byte multiples). M may be 0 (no launch).
//  * Asynchronous on `stream`; no allocation, no synchronization; launch errors surface at the next
//    CUDA call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace deepinfer::backend::cuda {

using bf16 = __nv_bfloat16;

void gemm(const bf16* x, int M, int K, const bf16* W, int N, float* y, cudaStream_t stream);
void gemm(const bf16* x, int M, int K, const bf16* W, int N, bf16* y, cudaStream_t stream);

// Grouped GEMM (MoE experts): group g owns rows [row_offsets[g], row_offsets[g + 1]) of x and y
// and multiplies them by weights[g] ([N, K]). row_offsets (G + 1 ints) and weights (G pointers) are
// DEVICE arrays written by earlier kernels, so the host never waits for the routing; max_rows is a
// host-side bound on row_offsets[G] (e.g. tokens x top-k) that sizes the grid. Every row's result is
// bitwise what gemm() gives for that row alone with weights[g]. Empty groups cost nothing.
void grouped_gemm(const bf16* x, const int* row_offsets, int G, int max_rows, int K, const bf16* const* weights,
                  int N, float* y, cudaStream_t stream);
void grouped_gemm(const bf16* x, const int* row_offsets, int G, int max_rows, int K, const bf16* const* weights,
                  int N, bf16* y, cudaStream_t stream);

// Grouped GEMM over weights stored back to back: group g's weight is stacked + g * N * K ([N, K]).
// Bitwise what grouped_gemm gives with weights[g] = stacked + g * N * K; large row counts run on the
// TMA + wgmma tiles (one tensor map covers every group), which the pointer form cannot use.
void grouped_gemm_stacked(const bf16* x, const int* row_offsets, int G, int max_rows, int K, const bf16* stacked,
                          int N, float* y, cudaStream_t stream);
void grouped_gemm_stacked(const bf16* x, const int* row_offsets, int G, int max_rows, int K, const bf16* stacked,
                          int N, bf16* y, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda
