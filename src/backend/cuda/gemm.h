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

// Several projections of the same input in one GEMM: W is the row-wise concatenation of weights
// W_0 .. W_{count-1} ([n_i, K] each, so W is [sum n_i, K]) and outputs[i].y ([M, n_i] fp32, row
// stride n_i) receives x W_i^T. One launch streams every weight (at one token, five small
// projections otherwise cost five launches' latency). Bitwise what gemm() of x and the whole W
// gives, column run by column run, for any M. Layout rules (violations abort: programming errors):
// 1 <= count <= 6; every n_i a positive multiple of 4 and all but the last a multiple of 256; every
// y 16-byte aligned.
struct GemmOutput {
  float* y;
  int n;
};
void gemm_split(const bf16* x, int M, int K, const bf16* W, const GemmOutput* outputs, int count,
                cudaStream_t stream);
// True when `widths` meets the layout rules above and every output of gemm_split is bitwise what
// gemm() of its own weight W_i alone gives (the K reduction order depends on (N, K) only, and these
// widths get the same one as their sum). Then a caller may pick either form call by call (e.g. by
// M) and stay batch invariant.
bool gemm_split_matches_separate(int K, const int* widths, int count);

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
// grouped_gemm_stacked with the groups' outputs side by side instead of stacked: row r of group g
// (row_offsets[g] <= r < row_offsets[g + 1]) lands at y + (r - row_offsets[g]) * G * N + g * N. For G
// groups of T rows each, y is [T, G * N] row-major (e.g. the grouped output projection, whose groups
// are then one [T, G * N] input of the next GEMM). Bitwise grouped_gemm_stacked's values; y must
// hold max over groups of their rows, times G * N.
void grouped_gemm_stacked_side_by_side(const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                                       const bf16* stacked, int N, bf16* y, cudaStream_t stream);

// The routed experts' w1|w3 GEMM with the SwiGLU in its epilogue: h [rows, N / 2] bf16 (row r of the
// stacked input -> row r of h) is what grouped_gemm_stacked into fp32 y followed by swiglu() (ops.h,
// same limit, no row weight) gives, bitwise, when each group's [N, K] weight in `stacked` has its
// gate (w1) and up (w3) rows interleaved in blocks of 8 (swiglu.cuh: rows 16 b .. 16 b + 7 are w1
// rows 8 b .., rows 16 b + 8 .. w3 rows 8 b ..; then y's columns are interleaved alike and
// swiglu(..., gate_up_interleaved = true) reads them so). The fp32 y never exists: at prefill it is
// 4x the bytes of h, written and read back once. Needs N % 16 == 0 and h 16-byte aligned.
// Returns false, launching nothing, where the tile this call would run on has no SwiGLU epilogue
// (no TMA path for these operands, or a tile without one): the caller then runs the two-step form
// grouped_gemm_stacked + swiglu(gate_up_interleaved = true).
bool grouped_gemm_stacked_swiglu(const bf16* x, const int* row_offsets, int G, int max_rows, int K,
                                 const bf16* stacked, int N, float limit, bf16* h, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda
