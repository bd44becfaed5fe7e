// The SwiGLU activation of the experts (CpuBackend::swiglu_expert's middle step), shared by the
// elementwise kernel (ops.cu: swiglu) and the routed w1/w3 GEMM's epilogue (gemm.cu:
// grouped_gemm_stacked_swiglu), so both compute each h value with the same operations and give
// the same bits. Internal to the CUDA backend; host-only code may include it for the layout helpers.
#pragma once

#include <cuda_runtime.h>

namespace deepinfer::backend::cuda {

// Gate/up interleaving of a w1|w3 weight for the fused epilogue: rows [16 b, 16 b + 8) are w1 rows
// [8 b, 8 b + 8) and rows [16 b + 8, 16 b + 16) are w3 rows [8 b, 8 b + 8). A GEMM output column n
// is then gate (n % 16 < 8) or up of h column 8 (n / 16) + n % 8, and a thread's mma / wgmma
// fragment holds each gate value with its up value (columns 8 j + c and 8 (j + 1) + c).
inline constexpr int kGateUpBlock = 8;

// Output column (GEMM, gate|up interleaved) of gate (up = false) or up (up = true) for h column i.
__host__ __device__ constexpr int interleaved_gate_up_column(int i, bool up) {
  return (i / kGateUpBlock) * 2 * kGateUpBlock + (up ? kGateUpBlock : 0) + i % kGateUpBlock;
}
// Its inverse for a gate column: the h column of output column n (n % 16 < 8).
__host__ __device__ constexpr int h_column(int n) {
  return (n / (2 * kGateUpBlock)) * kGateUpBlock + n % kGateUpBlock;
}
static_assert(h_column(interleaved_gate_up_column(13, false)) == 13 &&
              h_column(interleaved_gate_up_column(0, false)) == 0);

#ifdef __CUDACC__  // (host-only files include this for the layout helpers above)
// silu(min(g, limit)) * clamp(u, -limit, limit), as std::min / std::clamp define them. Every rounding
// step is an explicit _rn intrinsic, so no caller's compilation can contract them differently (the
// plain expression let nvcc fuse expf's last multiply with the 1 + into one fma; the CPU reference,
// built with -ffp-contract=off, rounds both, as this does).
__device__ __forceinline__ float swiglu_act(float g, float u, float limit) {
  const float gate = limit < g ? limit : g;
  const float up = u < -limit ? -limit : (limit < u ? limit : u);
  return __fmul_rn(__fdiv_rn(gate, __fadd_rn(1.0f, expf(-gate))), up);
}
#endif

}  // namespace deepinfer::backend::cuda
