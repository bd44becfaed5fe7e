// Where a GEMM writes its output: one [rows, N] array, or (gemm_split) consecutive column runs of
// the output each into its own [rows, width] array. A plain struct passed to the kernels by value
// (gemm.cu, gemm_wgmma.cu); the device side resolves it once per tile (gemm_common::tile_output).
// Internal to the GEMM library.
#pragma once

namespace deepinfer::backend::cuda {

inline constexpr int kMaxOutputRuns = 6;
// Every run but the last is a multiple of this many columns, the widest tile (BN <= 256): a tile's
// columns [n_begin, n_begin + BN), n_begin a multiple of BN, then always lie in one run (BN a power
// of two; gemm.cu keeps its 192-wide tile off split outputs).
inline constexpr int kOutputRunAlign = 256;

struct OutTarget {
  void* y = nullptr;  // runs == 0: [rows, N] row-major
  // Grouped calls with runs == 0 only: when > 0, the groups' outputs side by side — row m of group g
  // (row_offsets[g] <= m < row_offsets[g + 1]) at y + (m - row_offsets[g]) * group_ld + g * N
  // ([rows_per_group, G * N] for group_ld = G * N and equal groups).
  int group_ld = 0;
  int runs = 0;  // 0, or 1..kMaxOutputRuns column runs
  // Run i: columns [run_begin[i], run_begin[i] + run_width[i]) into run_y[i], [rows, run_width[i]]
  // row-major. run_begin[0] == 0, runs back to back.
  int run_begin[kMaxOutputRuns] = {};
  int run_width[kMaxOutputRuns] = {};
  void* run_y[kMaxOutputRuns] = {};
  // The SwiGLU epilogue (grouped_gemm_stacked_swiglu; kernels instantiated for the SwigluPairs output,
  // gemm_common.cuh, with runs == 0 and group_ld == 0): y is bf16 h [rows, N / 2], the activation of
  // the gate|up column pairs (swiglu.cuh) clamped at this limit.
  float swiglu_limit = 0.0f;
};

}  // namespace deepinfer::backend::cuda
