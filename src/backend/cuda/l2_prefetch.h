// L2 prefetch of weights a later kernel of the step will read. A decode step at a few tokens is a
// chain of GEMMs that stream weights from HBM, separated by chains of small latency-bound kernels
// (norms, mHC, RoPE, attention, routing) during which HBM sits idle. cuda_model.cu's decode graphs
// run these kernels on a side branch that starts when a GEMM completes, so the next GEMMs' first
// weight bytes are in L2 by the time they run (at most ~the L2's size a window, so nothing the
// chain touches is pushed out).
//
// Contract: fire and forget (cp.async.bulk.prefetch.L2, sm_90): nothing is written, no result
// depends on whether or when the bytes arrive; a kernel that later reads them sees the same
// values either way. Pointers and byte counts 16-byte aligned (weights always are; a count is
// rounded down). Asynchronous on `stream`.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace deepinfer::backend::cuda {

// Bytes [p, p + bytes) into L2.
void l2_prefetch(const void* p, size_t bytes, cudaStream_t stream);

// The first `budget` bytes of the selected experts' weights, in ascending expert order (the order a
// grouped GEMM's row tiles take them): expert e's weight is base + e * expert_bytes; `sel` [n] is a
// device array of expert ids (ids outside [0, num_experts) are ignored), written by an earlier kernel
// the side branch depends on.
void l2_prefetch_experts(const int32_t* sel, int n, int num_experts, const void* base, size_t expert_bytes,
                         size_t budget, cudaStream_t stream);

// Whether a graph kernel node's function is one of the above (cuda_model.cu keeps the edges into
// them full dependencies, so they start after the GEMM before them has finished reading, never
// during it).
bool is_l2_prefetch_kernel(const void* func);

}  // namespace deepinfer::backend::cuda
