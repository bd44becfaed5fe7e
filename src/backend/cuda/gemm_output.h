// Where a GEMM writes its output: one [rows, N] array, or (gemm_split) consecutive column runs of
// the output each into its own [rows, width] array. A plain struct passed to the kernels by value
// (gemm.cu, gemm_wgmma.cu); the device side resolves it once per tile (gemm_common::tile_output).
// Internal to the GEMM library.
#pragma once

namespace deepinfer::backend::cuda {

inline constexpr int kMaxOutputRuns = 6;
// Every run but the last is a multiple of this many columns, the widest tile (BN <= 256): a tile's
// columns [n_begin, n_begin + BN), n_begin a multiple of BN, then always lie in one run.
inline constexpr int kOutputRunAlign = 256;

struct OutTarget {
  void* y = nullptr;  // runs == 0: [rows, N] row-major
  int runs = 0;       // 0, or 1..kMaxOutputRuns column runs
  // Run i: columns [run_begin[i], run_begin[i] + run_width[i]) into run_y[i], [rows, run_width[i]]
  // row-major. run_begin[0] == 0, runs back to back.
  int run_begin[kMaxOutputRuns] = {};
  int run_width[kMaxOutputRuns] = {};
  void* run_y[kMaxOutputRuns] = {};
};

}  // namespace deepinfer::backend::cuda
