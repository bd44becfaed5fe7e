// The large-M path of gemm.cu: TMA + wgmma (sm_90a) tiles that compute every output element with
// exactly the sequence of operations the mma.sync tiles of gemm.cu use, so gemm.cu may pick either
// from M without changing a bit (the contract of gemm.h). Internal to the GEMM library.
//
// Why the bits agree: for one output element, a wgmma m64nNk16 step and an mma.sync m16n8k16 step
// take the same 16 products and the same fp32 accumulator (measured on the H200: 0 differing bits
// over random data, tests/cuda/gemm_test.cc forces both on the same inputs). Both walk K in
// 16-wide steps in increasing order inside the slices of gemm.cu's slice plan, start each slice's
// partial at zero and fold the partials as (((0 + p_0) + p_1) + ...) when there are several.
#pragma once

#include "backend/cuda/gemm_output.h"

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace deepinfer::backend::cuda::wgmma_path {

using bf16 = __nv_bfloat16;

// What the tile writes: y in fp32 or bf16, or (grouped, gate|up interleaved weights) bf16 h, the
// SwiGLU of each gate|up column pair (OutTarget::swiglu_limit, gemm_common.cuh's SwigluPairs).
enum class Output { kF32, kBf16, kSwigluBf16 };

struct Problem {
  const bf16* x = nullptr;  // [x_rows, K]
  int x_rows = 0;           // dense: M; grouped: max_rows (rows past it read as zeros)
  const bf16* w = nullptr;  // dense: [N, K]; grouped: the stacked weights [G * N, K]
  int N = 0, K = 0;
  const int* row_offsets = nullptr;  // grouped only: [G + 1] device offsets
  int num_groups = 0;                // 0: dense
  OutTarget out;                     // y [rows, N], or gemm_split's column runs
  Output output = Output::kF32;
  int slice_ktiles = 0;  // 64-wide k-tiles per slice (gemm.cu's slice_chunks / 4)
  int num_slices = 1;
};

// True when the TMA path can run this operand set: K % 64 == 0, x and w 16-byte aligned, the
// driver's tensor-map encoder is reachable and the current device is sm_90. Host only, cheap.
bool usable(const bf16* x, const bf16* w, int K);

enum class Tile {
  kM128N128Fold,    // 128 x 128, one CTA runs every slice and folds them in registers (large M)
  kM128N192Fold,    // 128 x 192, the same fold (setmaxnreg gives the consumers 232 registers)
  kM128N256,        // 128 x 256, num_slices == 1 only (large M)
  kM64N128Cluster,  // 64 x 128, the S CTAs of a cluster run one slice each, DSMEM sum (small and mid M)
  kM64N128ClusterTwoPerSm,  // the same with 4 stages, two CTAs per SM
  kM128N128Cluster,  // 128 x 128, cluster slices (mid M: half the weight re-reads of 64-row tiles)
  kM64N256Cluster,   // 64 x 256, cluster slices, one m64n256 wgmma per k16 step (half the x re-reads)
  kM128N256Cluster,  // 128 x 256, cluster slices (large M with few slices: S CTAs share a tile's K)
  kM64N128FoldTwoPerSm,  // 64 x 128, one CTA runs every slice (register fold), two CTAs per SM (experts at decode)
  kM64N128Fold,          // the same at one CTA per SM, 8 stages (dense, about one wave of tiles, deep K)
};
// Asynchronous on `stream`; grouped calls launch max_rows / BM + G row-tile slots.
void run(const Problem& problem, Tile tile, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::wgmma_path
