// Blocked fp32 GEMM for the CPU backend: C[M, N] = A[M, K] * B[N, K]^T (both row-major, the
// weight layout of every checkpoint). Each C element is one dot product whose summation order is
// fixed (8 lanes over K, a fixed lane reduction, then the K tail in order), independent of M, N,
// the tile it falls in and the thread that computes it: results are batch-invariant and
// deterministic. Threads split the work with OpenMP.
#pragma once

namespace deepinfer::backend::cpu {

void gemm_nt(const float* A, int M, int K, const float* B, int N, float* C);

// The same dot product the GEMM uses for one element (exposed for tests).
float dot(const float* a, const float* b, int K);

}  // namespace deepinfer::backend::cpu
