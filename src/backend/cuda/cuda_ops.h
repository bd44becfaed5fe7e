// Host entry points of the CUDA kernels. Includable from plain C++ (only the CUDA runtime API
// header is needed); the kernels themselves live in the .cu files.
//
// Each op follows the same contract as the CpuBackend op of the same name (backend/backend.h),
// including batch invariance: a row's result depends only on that row's inputs, never on M.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace deepinfer::backend::cuda {

// y[m, i] = x[m, i] * rsqrt(mean(x[m, :]^2) + eps) * (weight ? weight[i] : 1), fp32, for m < M,
// i < n. One block per row, fixed reduction order. x, weight, y are device pointers; in-place
// (x == y) allowed. Asynchronous on `stream`; launch errors are reported by the next CUDA call.
void rms_norm_cuda(const float* x, int M, int n, const float* weight, float eps, float* y, cudaStream_t stream);

// Test helper: runs rms_norm_cuda on host arrays (allocate, copy in, launch, synchronize, copy
// out, free). Returns "" on success, otherwise a description of the first CUDA error.
std::string rms_norm_cuda_host(const float* x, int M, int n, const float* weight, float eps, float* y);

}  // namespace deepinfer::backend::cuda
