// Shared by the GPU test suites: they build everywhere (CI has no GPU) and skip where no CUDA
// device is present.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

namespace deepinfer::backend::cuda {

inline bool has_cuda_device() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

}  // namespace deepinfer::backend::cuda

#define SKIP_WITHOUT_CUDA_DEVICE() \
  if (!::deepinfer::backend::cuda::has_cuda_device()) GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount)"
